"""Receiver side of every weight payload: one `serialized_named_tensors` entry of SGLang's
`/update_weights_from_tensor` back into named tensors, by its `load_format`. Our formats (shm,
inline) are JSON objects with a table of contents (`layout`); SGLang's own are pickles
(`sglang_payload`)."""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

from loongsage.inference.weight_wire.layout import NamedTensors, read_flat
from loongsage.inference.weight_wire.sglang_payload import LOAD_FORMATS as SGLANG_LOAD_FORMATS
from loongsage.inference.weight_wire.sglang_payload import decode_named_tensors
from loongsage.inference.weight_wire.shm_segments import shm_views, unpack_shm


@contextmanager
def open_named_tensors(load_format: str | None, payload: dict | str) -> Iterator[tuple[NamedTensors, bool]]:
    """Receiver side, for a receiver that copies the tensors where they go: (named tensors, owned)
    valid inside the block only. shm: views into the sender's segment, which the sender keeps
    until this receiver answers (owned False: copy them before leaving the block; no copy is
    made here). Other formats: unpacked as `unpack_named_tensors` does (owned True: made for
    this call alone, keep them if you like). Raises as `unpack_named_tensors` does."""
    if load_format == "shm":
        _check_payload(payload)
        with shm_views(payload) as views:
            yield views, False
    else:
        yield unpack_named_tensors(load_format, payload), True


def unpack_inline(payload: dict) -> NamedTensors:
    raw = bytearray(base64.b64decode(payload["data"]))
    flat = torch.frombuffer(raw, dtype=torch.uint8) if raw else torch.empty(0, dtype=torch.uint8)
    return read_flat(flat, payload["tensors"])


UNPACKERS: dict[str, Callable[[dict], NamedTensors]] = {"shm": unpack_shm, "inline": unpack_inline}


def unpack_named_tensors(load_format: str | None, payload: dict | str) -> NamedTensors:
    """Receiver side: turn one `serialized_named_tensors` entry back into (name, tensor) pairs.
    SGLang's own formats (null, "direct", "flattened_bucket": what `cuda_ipc` sends) are
    pickles, decoded by `sglang_payload`; ours are JSON objects."""
    if load_format in SGLANG_LOAD_FORMATS:
        return decode_named_tensors(load_format, payload)
    if load_format not in UNPACKERS:
        known = sorted(UNPACKERS) + [f for f in SGLANG_LOAD_FORMATS if f is not None] + ["null"]
        raise ValueError(f"load_format {load_format!r} is not supported; expected one of {known}")
    _check_payload(payload)
    return UNPACKERS[load_format](payload)


def _check_payload(payload) -> None:
    if not isinstance(payload, dict) or not isinstance(payload.get("tensors"), list):
        raise ValueError("serialized_named_tensors entry must be an object with a 'tensors' table")
