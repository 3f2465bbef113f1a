"""The HF model directory both backends write a checkpoint as: the starting model's files
(config, tokenizer) with the trained weights, plus the trainer's state file."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from safetensors.torch import save_file
from torch import Tensor

MODEL_FILE = "model.safetensors"
STATE_FILE = "trainer_state.json"
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")


def write_hf_dir(out: Path, source_dir: Path, weights: dict[str, Tensor]) -> None:
    """`weights`: HF-named tensors as HF stores them (tied aliases once), contiguous."""
    for path in source_dir.iterdir():
        is_weights = path.name.endswith(WEIGHT_SUFFIXES) or path.name.endswith(".index.json")
        if path.is_file() and not is_weights:
            shutil.copy2(path, out / path.name)
    save_file(weights, out / MODEL_FILE, metadata={"format": "pt"})


def write_trainer_state(out: Path, state: dict) -> None:
    (out / STATE_FILE).write_text(json.dumps(state))


def read_trainer_state(src: Path) -> dict:
    if not (src / STATE_FILE).is_file():
        raise FileNotFoundError(f"{src} is not a trainer checkpoint: {STATE_FILE} is missing")
    return json.loads((src / STATE_FILE).read_text())
