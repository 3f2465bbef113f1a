"""Teachers for tests: the tiny model with its weights perturbed, a different model per seed that
shares the student's tokenizer."""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file

from loongsage.inference.embedded.weights import read_safetensors


def perturbed_model(model_path: str | Path, folder: Path, seed: int, scale: float = 0.3) -> Path:
    """A copy of `model_path` in `folder` with seeded Gaussian noise of `scale` on every weight."""
    generator = torch.Generator().manual_seed(seed)
    shutil.copytree(model_path, folder)
    weights = {n: (t + scale * torch.randn(t.shape, generator=generator)).contiguous() for n, t in read_safetensors(model_path)}
    save_file(weights, str(folder / "model.safetensors"))
    return folder
