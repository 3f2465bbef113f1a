"""Describe a bucket as one flat byte buffer plus a JSON-able table of contents."""

from __future__ import annotations

import ctypes

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
        copy_bytes(flat[start : start + entry["nbytes"]], tensor.detach().contiguous().reshape(-1).view(torch.uint8))


def view_flat(flat: torch.Tensor, entries: list[dict]) -> NamedTensors:
    """Every tensor as a view into `flat`, valid as long as `flat`'s memory is. Raises
    ValueError for an entry that does not fit in `flat` or names an unknown dtype."""
    out = []
    for entry in entries:
        name, dtype, start, nbytes = entry["name"], entry["dtype"], entry["offset"], entry["nbytes"]
        if dtype not in DTYPES:
            raise ValueError(f"tensor {name!r}: unknown dtype {dtype!r}")
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (start, nbytes)):
            raise ValueError(f"tensor {name!r}: offset and nbytes must be non-negative integers")
        if start + nbytes > flat.numel():
            raise ValueError(f"tensor {name!r}: bytes {start}..{start + nbytes} lie outside the {flat.numel()}-byte buffer")
        if start % DTYPES[dtype].itemsize:
            raise ValueError(f"tensor {name!r}: offset {start} is not aligned to its {dtype} elements")
        try:
            out.append((name, flat[start : start + nbytes].view(DTYPES[dtype]).reshape(entry["shape"])))
        except RuntimeError as exc:  # a shape that does not hold nbytes
            raise ValueError(f"tensor {name!r}: {exc}") from None
    return out


def read_flat(flat: torch.Tensor, entries: list[dict]) -> NamedTensors:
    """Copy every tensor out, so the result outlives the buffer it came from."""
    return [(name, view.clone()) for name, view in view_flat(flat, entries)]


def copy_bytes(dst: torch.Tensor, src: torch.Tensor) -> None:
    """`dst.copy_(src)`; between contiguous CPU tensors of one dtype and size, one memmove on this
    thread instead. torch's copy runs an OpenMP team (on 2 cores it measured ~40 ms for 540 MB
    with 2 threads, ~75 ms with one), and glibc's memmove is as fast on one thread (~45 ms: it
    streams large blocks with non-temporal stores), leaves the other core to the process on the
    other end of a transfer, and releases the GIL (ctypes), so a sender's HTTP thread runs meanwhile."""
    if (
        dst.device.type == "cpu"
        and src.device.type == "cpu"
        and dst.dtype == src.dtype
        and dst.shape == src.shape
        and dst.layout == src.layout == torch.strided
        and dst.is_contiguous()
        and src.is_contiguous()
        and not dst.requires_grad
    ):
        nbytes = dst.numel() * dst.element_size()
        if nbytes:
            ctypes.memmove(dst.data_ptr(), src.data_ptr(), nbytes)
        return
    with torch.no_grad():
        dst.copy_(src)
