"""Describe a bucket as one flat byte buffer plus a JSON-able table of contents."""

from __future__ import annotations

import torch

from loongsage.transfer.buckets import NamedTensors

DTYPES = {
    str(d).removeprefix("torch."): d
    for d in (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32)
}


ALIGN = 64  # every tensor starts on a boundary any dtype can be viewed at


def table_of_contents(bucket: NamedTensors) -> tuple[list[dict], int]:
    entries, offset = [], 0
    for name, tensor in bucket:
        nbytes = tensor.numel() * tensor.element_size()
        dtype = str(tensor.dtype).removeprefix("torch.")
        if dtype not in DTYPES:
            raise TypeError(f"cannot transfer {name}: dtype {tensor.dtype} is not supported")
        entries.append({"name": name, "dtype": dtype, "shape": list(tensor.shape), "offset": offset, "nbytes": nbytes})
        offset += -(-nbytes // ALIGN) * ALIGN
    return entries, offset


def write_flat(bucket: NamedTensors, flat: torch.Tensor, entries: list[dict]) -> None:
    for (_, tensor), entry in zip(bucket, entries):
        start = entry["offset"]
        flat[start : start + entry["nbytes"]].copy_(tensor.detach().contiguous().reshape(-1).view(torch.uint8))


def read_flat(flat: torch.Tensor, entries: list[dict]) -> NamedTensors:
    """Copy every tensor out, so the result outlives the buffer it came from."""
    out = []
    for entry in entries:
        if entry["dtype"] not in DTYPES:
            raise ValueError(f"tensor {entry['name']!r}: unknown dtype {entry['dtype']!r}")
        start = entry["offset"]
        raw = flat[start : start + entry["nbytes"]]
        out.append((entry["name"], raw.view(DTYPES[entry["dtype"]]).reshape(entry["shape"]).clone()))
    return out
