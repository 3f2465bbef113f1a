"""HF model weights on disk, one tensor at a time: read (single file or sharded index) and write
(shards of bounded size), so converting a model never holds a second full copy of it."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

import torch
from torch import Tensor

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
# What a writer holds before it writes a shard: the bound on the extra memory of an export.
DEFAULT_SHARD_BYTES = 2 * 1024**3
STORED_DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16, "F64": torch.float64}


class SafetensorsReader:
    """The tensors of an HF model directory by name; files are opened once, tensors read on demand."""

    def __init__(self, hf_dir: str | Path):
        self.dir = Path(hf_dir)
        if not self.dir.is_dir():
            raise FileNotFoundError(f"{self.dir} is not a directory")
        if (self.dir / INDEX_FILE).is_file():
            self.files = dict(json.loads((self.dir / INDEX_FILE).read_text())["weight_map"])
        elif (self.dir / SINGLE_FILE).is_file():
            self.files = dict.fromkeys(_keys(self.dir / SINGLE_FILE), SINGLE_FILE)
        else:
            raise FileNotFoundError(f"{self.dir} holds no HF weights: neither {SINGLE_FILE} nor {INDEX_FILE}")
        self._open: dict[str, object] = {}

    @property
    def names(self) -> set[str]:
        return set(self.files)

    def tensor(self, name: str) -> Tensor:
        return self._handle(name).get_tensor(name)

    def dtype(self, name: str) -> torch.dtype:
        """The stored dtype of a tensor, without reading it."""
        stored = self._handle(name).get_slice(name).get_dtype()
        if stored not in STORED_DTYPES:
            raise ValueError(f"{self.dir}: tensor {name!r} is stored as {stored}, not a floating-point type we load")
        return STORED_DTYPES[stored]

    def _handle(self, name: str):
        if name not in self.files:
            raise KeyError(f"{self.dir} has no tensor {name!r}")
        file = self.files[name]
        if file not in self._open:
            from safetensors import safe_open

            self._open[file] = safe_open(str(self.dir / file), framework="pt")
        return self._open[file]

    def close(self) -> None:
        self._open.clear()

    def __enter__(self) -> SafetensorsReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _keys(path: Path) -> list[str]:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as handle:
        return list(handle.keys())


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def write_safetensors(
    out_dir: str | Path, tensors: Iterable[tuple[str, Tensor]], max_shard_bytes: int = DEFAULT_SHARD_BYTES
) -> list[Path]:
    """Write named tensors as HF does: one model.safetensors, or when they exceed
    `max_shard_bytes`, model-0000i-of-0000n.safetensors shards with an index. Holds at most one
    shard in memory. Returns the files written."""
    from safetensors.torch import save_file

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    parts: list[tuple[Path, list[str]]] = []
    pending: dict[str, Tensor] = {}
    pending_bytes = total_bytes = 0
    seen: set[str] = set()

    def flush() -> None:
        part = out_dir / f".part-{len(parts)}.safetensors"
        save_file(pending, str(part), metadata={"format": "pt"})
        part.chmod(0o666 & ~_umask())  # safetensors creates it owner-only
        parts.append((part, list(pending)))
        pending.clear()

    for name, tensor in tensors:
        size = tensor.numel() * tensor.element_size()
        if pending and pending_bytes + size > max_shard_bytes:
            flush()
            pending_bytes = 0
        if name in seen:
            raise ValueError(f"tensor {name!r} given twice")
        seen.add(name)
        pending[name] = tensor
        pending_bytes += size
        total_bytes += size
    if pending or not parts:
        flush()

    if len(parts) == 1:
        final = out_dir / SINGLE_FILE
        parts[0][0].replace(final)
        return [final]
    written, weight_map = [], {}
    for i, (part, names) in enumerate(parts, start=1):
        final = out_dir / f"model-{i:05d}-of-{len(parts):05d}.safetensors"
        part.replace(final)
        written.append(final)
        weight_map |= dict.fromkeys(names, final.name)
    index = out_dir / INDEX_FILE
    index.write_text(json.dumps({"metadata": {"total_size": total_bytes}, "weight_map": weight_map}, indent=2))
    return [*written, index]
