"""Loading an HF directory into `LlamaModel` and applying named weight updates to it."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import torch
from safetensors import safe_open

from loongsage.inference.embedded.llama import LlamaModel, ModelConfig, rope_inv_freq


class WeightError(ValueError):
    """A named tensor that does not fit the model; `name` is the offending parameter, `kind` what
    is wrong with it: "name" (the model has no such parameter) or "shape"."""

    def __init__(self, message: str, name: str, kind: str = "name"):
        super().__init__(message)
        self.name, self.kind = name, kind


def read_safetensors(model_dir: str | Path) -> list[tuple[str, torch.Tensor]]:
    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors files in {model_dir}")
    named = []
    for path in files:
        with safe_open(str(path), framework="pt") as f:
            named.extend((name, f.get_tensor(name)) for name in f.keys())
    return named


def load_model(model_dir: str | Path, dtype: torch.dtype = torch.float32) -> LlamaModel:
    cfg = ModelConfig.from_dir(model_dir)
    # Build on the meta device: random init of a real model would be thrown away anyway.
    with torch.device("meta"):
        model = LlamaModel(cfg)
    model = model.to_empty(device="cpu").to(dtype)
    if cfg.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    model.inv_freq = rope_inv_freq(cfg)
    model.requires_grad_(False)
    model.fuse_projections()
    named = read_safetensors(model_dir)
    loaded = apply_named_tensors(model, named)
    missing = [n for n, p in model.named_parameters() if id(p) not in loaded]
    if missing:
        raise WeightError(f"{model_dir}: checkpoint lacks {len(missing)} parameters, e.g. {missing[0]}", missing[0])
    return model.eval()


def apply_named_tensors(model: LlamaModel, named: Iterable[tuple[str, torch.Tensor]]) -> set[int]:
    """Copy each tensor into the parameter of the same HF name.

    Everything is validated before the first copy so that a bad bucket leaves the model
    untouched. Returns the ids of the parameters written.
    """
    params = dict(model.named_parameters(remove_duplicate=False))
    named = list(named)
    check_shapes(model, [(name, tensor.shape) for name, tensor in named])
    with torch.no_grad():
        for name, tensor in named:
            params[name].copy_(tensor)
    return {id(params[name]) for name, _ in named}


def check_shapes(model: LlamaModel, named_shapes: Iterable[tuple[str, Sequence[int]]], params: dict | None = None) -> None:
    """Raise WeightError for the first name the model lacks or whose shape differs. Apart from
    `apply_named_tensors`, receivers call it before taking in any bytes, so a bad request is
    refused while the sender can still be told. `params`: the model's named parameters
    (remove_duplicate=False), for a caller that keeps them (listing them costs ~0.3 ms)."""
    params = params if params is not None else dict(model.named_parameters(remove_duplicate=False))
    for name, shape in named_shapes:
        if name not in params:
            raise WeightError(f"unknown parameter {name!r}", name)
        if tuple(shape) != tuple(params[name].shape):
            raise WeightError(
                f"shape mismatch for {name!r}: got {list(shape)}, model has {list(params[name].shape)}", name, "shape"
            )
