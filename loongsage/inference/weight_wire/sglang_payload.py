"""Receiver half of SGLang's own tensor payload (docs/sglang_protocol.md, difference 3).

One `serialized_named_tensors` entry is `base64(ForkingPickler dump)` of `[(name, tensor), ...]`
(load_format null or "direct") or of `{"flattened_tensor": uint8 tensor, "metadata":
[FlattenedTensorMetadata]}` ("flattened_bucket"). CPU tensors arrive as the names of torch's
file_system shared-memory segments, CUDA tensors as CUDA IPC handles.

Unpickling runs whatever callables the payload names, so only an allow-list of globals is
resolved (as SGLang's SafeUnpickler does, narrowed to what our receivers rebuild): torch's
tensor and storage rebuild functions, the tensor and storage classes, dtypes, Size, and SGLang's
metadata record; CUDA IPC tensors only where this process sees a GPU (the receiver copies them
out). Anything else fails before it is called. What the allowed rebuild functions can still be
made to do: map a shared-memory segment named by the sender, the purpose of the
format, on an endpoint that replaces the model's weights anyway.
"""

from __future__ import annotations

import base64
import binascii
import io
import pickle
from dataclasses import dataclass

import torch
import torch.multiprocessing.reductions  # noqa: F401  (the rebuild functions resolved below)

from loongsage.inference.weight_wire.layout import NamedTensors

# null is SGLang's default: the model's own load_weights; "direct" copies by parameter name. The
# embedded engine's parameters carry the checkpoint's names, so both load alike here.
LOAD_FORMATS = (None, "direct", "flattened_bucket")

_REDUCTIONS = "torch.multiprocessing.reductions"
_ALLOWED = {
    (_REDUCTIONS, "rebuild_tensor"),
    (_REDUCTIONS, "rebuild_typed_storage"),
    (_REDUCTIONS, "rebuild_storage_filename"),
    (_REDUCTIONS, "rebuild_storage_empty"),
    ("torch", "Tensor"),
    ("torch.nn.parameter", "Parameter"),
    ("torch.storage", "UntypedStorage"),
    ("torch", "Size"),
}
# Allowed in SGLang too, refused here for a reason the sender can act on.
_HINTS = {
    (_REDUCTIONS, "rebuild_cuda_tensor"): "CUDA IPC tensors need a GPU and this process sees none: send CPU tensors",
    (_REDUCTIONS, "rebuild_storage_fd"): (
        "CPU tensors shared by file descriptor reach only the sender's own children: share them with torch's file_system strategy"
    ),
    ("multiprocessing.resource_sharer", "DupFd"): (
        "CPU tensors shared by file descriptor reach only the sender's own children: share them with torch's file_system strategy"
    ),
}
_METADATA = ("sglang.srt.weight_sync.tensor_bucket", "FlattenedTensorMetadata")
# What a CUDA IPC tensor's pickle names: the rebuild, and the storage class among its arguments.
_CUDA_IPC = {(_REDUCTIONS, "rebuild_cuda_tensor"), ("torch.storage", "TypedStorage")}
# In torch's rebuild_cuda_tensor arguments: the device (an index; a UUID from SGLang's senders).
_CUDA_DEVICE_ARG = 6


@dataclass
class FlattenedTensorMetadata:
    """SGLang 0.5.23's record of one tensor in a flattened bucket: byte range [start_idx, end_idx)
    of the uint8 buffer, viewed as `dtype` and reshaped to `shape`."""

    name: str
    shape: torch.Size
    dtype: torch.dtype
    start_idx: int
    end_idx: int
    numel: int


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) in _ALLOWED:
            return super().find_class(module, name)
        if (module, name) in _CUDA_IPC and torch.cuda.is_available():
            return _rebuild_cuda_tensor if name == "rebuild_cuda_tensor" else super().find_class(module, name)
        if (module, name) == _METADATA:
            return FlattenedTensorMetadata
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        hint = _HINTS.get((module, name), "only torch tensors, storages, dtypes and sizes may appear")
        raise pickle.UnpicklingError(f"global {module}.{name} is not allowed in a tensor payload: {hint}")


def _rebuild_cuda_tensor(*args):
    """torch's rebuild of a CUDA IPC tensor, with the device named as SGLang's senders (and ours,
    `ipc_bucket`) name it: by UUID, since the receiver may number its GPUs otherwise; an index is
    taken as it is (SGLang's `_rebuild_cuda_tensor_modified`)."""
    device = args[_CUDA_DEVICE_ARG]
    if isinstance(device, str):
        by_uuid = {str(torch.cuda.get_device_properties(i).uuid): i for i in range(torch.cuda.device_count())}
        if device not in by_uuid:
            raise ValueError(f"a CUDA IPC tensor on GPU {device}, which this process does not see")
        device = by_uuid[device]
    return torch.multiprocessing.reductions.rebuild_cuda_tensor(*args[:_CUDA_DEVICE_ARG], device, *args[_CUDA_DEVICE_ARG + 1 :])


def unpickle(entry: str) -> object:
    """One entry, base64 text as it comes over HTTP. ValueError for anything that is not a
    payload of allowed globals, whatever failed inside the unpickler."""
    if not isinstance(entry, str):
        raise ValueError(f"an entry must be a base64 string, got {type(entry).__name__}")
    try:
        raw = base64.b64decode(entry, validate=True)
    except binascii.Error as exc:
        raise ValueError(f"an entry is not valid base64: {exc}") from None
    try:
        return _Unpickler(io.BytesIO(raw)).load()
    except Exception as exc:  # noqa: BLE001  (a malformed pickle fails in any of a dozen ways)
        raise ValueError(f"cannot unpickle the entry: {type(exc).__name__}: {exc}") from None


def decode_named_tensors(load_format: str | None, entry: str) -> NamedTensors:
    """(name, tensor) pairs out of one entry. The tensors may still map the sender's shared
    memory: copy them out, then drop them (the sender frees the segment once every receiver has)."""
    if load_format not in LOAD_FORMATS:
        raise ValueError(f"load_format {load_format!r} is not one of SGLang's {list(LOAD_FORMATS)}")
    obj = unpickle(entry)
    if load_format == "flattened_bucket":
        return _from_flattened(obj)
    if not isinstance(obj, list):
        raise ValueError(f"expected a list of (name, tensor) pairs, got {type(obj).__name__}")
    return [_pair(item, i) for i, item in enumerate(obj)]


def _pair(item: object, index: int) -> tuple[str, torch.Tensor]:
    if not (isinstance(item, (tuple, list)) and len(item) == 2):
        raise ValueError(f"item {index}: expected a (name, tensor) pair, got {type(item).__name__}")
    name, tensor = item
    if not isinstance(name, str) or not isinstance(tensor, torch.Tensor):
        raise ValueError(f"item {index}: expected (str, Tensor), got ({type(name).__name__}, {type(tensor).__name__})")
    return name, tensor


def _from_flattened(obj: object) -> NamedTensors:
    if not (isinstance(obj, dict) and {"flattened_tensor", "metadata"} <= obj.keys()):
        raise ValueError("flattened_bucket: expected {'flattened_tensor': tensor, 'metadata': [...]}")
    flat, metadata = obj["flattened_tensor"], obj["metadata"]
    if not (isinstance(flat, torch.Tensor) and flat.dtype == torch.uint8 and flat.dim() == 1):
        raise ValueError("flattened_bucket: flattened_tensor must be a 1-D uint8 tensor")
    if not isinstance(metadata, list) or not all(isinstance(m, FlattenedTensorMetadata) for m in metadata):
        raise ValueError("flattened_bucket: metadata must be a list of FlattenedTensorMetadata")
    out = []
    for meta in metadata:
        try:
            nbytes = torch.Size(meta.shape).numel() * meta.dtype.itemsize
            if not 0 <= meta.start_idx <= meta.end_idx <= flat.numel() or meta.end_idx - meta.start_idx != nbytes:
                raise ValueError(f"bytes [{meta.start_idx}, {meta.end_idx}) do not hold {list(meta.shape)} {meta.dtype}")
            tensor = flat[meta.start_idx : meta.end_idx].view(meta.dtype).reshape(meta.shape)
        except (TypeError, AttributeError, RuntimeError, ValueError) as exc:
            raise ValueError(f"flattened_bucket: tensor {meta.name!r}: {exc}") from None
        out.append((str(meta.name), tensor))
    return out
