"""Loading an HF directory into `LlamaModel` and applying named weight updates to it."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
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


class DiskTensors:
    """The named tensors of an HF directory's safetensors, read one at a time as iterated: loading
    a model (or swapping a teacher into an engine) then holds one tensor beyond the model, not a
    second copy of it. `shapes()` reads only the files' headers."""

    def __init__(self, model_dir: str | Path):
        self.files = sorted(Path(model_dir).glob("*.safetensors"))
        if not self.files:
            raise FileNotFoundError(f"no *.safetensors files in {model_dir}")

    def shapes(self) -> list[tuple[str, list[int]]]:
        shapes = []
        for path in self.files:
            with safe_open(str(path), framework="pt") as f:
                shapes.extend((name, f.get_slice(name).get_shape()) for name in f.keys())
        return shapes

    def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
        for path in self.files:
            with safe_open(str(path), framework="pt") as f:
                for name in f.keys():
                    yield name, f.get_tensor(name)


def read_safetensors(model_dir: str | Path) -> list[tuple[str, torch.Tensor]]:
    """Every tensor at once (tests and benches that keep them)."""
    return list(DiskTensors(model_dir))


def load_model(model_dir: str | Path, dtype: torch.dtype = torch.float32) -> LlamaModel:
    cfg = ModelConfig.from_dir(model_dir)
    # Its layers skip the random init (llama.Linear): the memory is allocated, and then read.
    model = LlamaModel(cfg).to(dtype)
    if cfg.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    model.inv_freq = rope_inv_freq(cfg)
    model.requires_grad_(False)
    model.fuse_projections()
    loaded = apply_named_tensors(model, DiskTensors(model_dir))
    missing = [n for n, p in model.named_parameters() if id(p) not in loaded]
    if missing:
        raise WeightError(f"{model_dir}: checkpoint lacks {len(missing)} parameters, e.g. {missing[0]}", missing[0])
    return model.eval()


def apply_named_tensors(model: LlamaModel, named: Iterable[tuple[str, torch.Tensor]]) -> set[int]:
    """Copy each tensor into the parameter of the same HF name.

    Every name and shape is validated before the first copy so that a bad bucket leaves the
    model untouched (DiskTensors: from the files' headers, the tensors then read one at a time).
    Returns the ids of the parameters written.
    """
    params = dict(model.named_parameters(remove_duplicate=False))
    if isinstance(named, DiskTensors):
        check_shapes(model, named.shapes(), params)
    else:
        named = list(named)
        check_shapes(model, [(name, tensor.shape) for name, tensor in named], params)
    written = set()
    with torch.no_grad():
        for name, tensor in named:
            params[name].copy_(tensor)
            written.add(id(params[name]))
    return written


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
