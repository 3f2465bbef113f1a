"""SGLang's tensor payload (base64 of a ForkingPickler dump) as `ipc_bucket` makes it and
`sglang_payload` reads it: exact tensors back, torch's sharing strategy left as it was, segments
released, and an allow-list that refuses every other global before calling it."""

from __future__ import annotations

import base64
import io
import os
import pickle
import sys
import types
from dataclasses import dataclass
from multiprocessing.reduction import ForkingPickler

import pytest
import torch
import torch.multiprocessing

from loongsage.inference.weight_wire.sglang_payload import decode_named_tensors
from loongsage.inference.weight_wire.unpack import unpack_named_tensors
from loongsage.transfer.ipc_bucket import IpcBucket, file_system_sharing, share_count, shared_bucket


def own_segments() -> list[str]:
    return sorted(f for f in os.listdir("/dev/shm") if f.startswith(f"torch_{os.getpid()}_"))


def bucket():
    gen = torch.Generator().manual_seed(0)
    return [
        ("w", torch.randn(3, 5, generator=gen)),
        ("half", torch.randn(7, generator=gen).to(torch.bfloat16)),
        ("empty", torch.empty(0, 4)),
        ("ids", torch.arange(6, dtype=torch.int64).reshape(2, 3)),
        ("strided", torch.randn(4, 6, generator=gen).t()),  # not contiguous
    ]


def b64_dump(obj) -> str:
    buf = io.BytesIO()
    ForkingPickler(buf).dump(obj)
    return base64.b64encode(buf.getvalue()).decode("ascii")


@pytest.mark.parametrize("load_format", [None, "direct"])
def test_round_trip_keeps_names_dtypes_shapes_values(load_format):
    sent = bucket()
    with shared_bucket(sent) as shared:
        received = unpack_named_tensors(load_format, shared.serialize())
        assert [n for n, _ in received] == [n for n, _ in sent]
        for (_, want), (_, got) in zip(sent, received):
            assert got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want)
        del received


def test_the_sharing_strategy_is_file_system_only_while_packing():
    before = torch.multiprocessing.get_sharing_strategy()
    assert before == "file_descriptor"  # torch's default on Linux: the case the scoping is for
    with file_system_sharing():
        assert torch.multiprocessing.get_sharing_strategy() == "file_system"
    with shared_bucket(bucket()) as shared:
        shared.serialize()
        assert torch.multiprocessing.get_sharing_strategy() == before
    assert torch.multiprocessing.get_sharing_strategy() == before


def test_each_dump_counts_one_reader_and_release_takes_back_the_unread():
    """The reference count ipc_bucket reads is torch's: 1 for the sender, +1 a dump, -1 a reading.
    (Were torch to move it, this fails before a push leaks.)"""
    assert own_segments() == []
    shared = IpcBucket(bucket())
    name = shared._shm_name
    assert own_segments() == [name.lstrip("/")] and share_count(name) == 1
    payloads = [shared.serialize() for _ in range(3)]
    assert share_count(name) == 4
    read = decode_named_tensors(None, payloads[0])
    assert share_count(name) == 3
    del read
    shared.release()  # two dumps never read
    assert own_segments() == []


def test_a_payload_shared_by_file_descriptor_is_refused_with_the_fix():
    tensor = torch.ones(3)
    with pytest.raises(ValueError, match=r"rebuild_storage_fd|DupFd.*file_system strategy"):
        decode_named_tensors(None, b64_dump([("w", tensor)]))


class _System:
    def __init__(self, command: str):
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


def test_a_pickle_naming_os_system_is_refused_without_running(tmp_path):
    marker = tmp_path / "ran"
    payload = base64.b64encode(pickle.dumps([("w", _System(f"touch {marker}"))])).decode()
    with pytest.raises(ValueError, match=r"global (os|posix)\.system is not allowed"):
        decode_named_tensors(None, payload)
    assert not marker.exists()


@pytest.mark.parametrize(
    "obj, message",
    [
        ({"w": 1}, "expected a list of"),
        ([("w", [1.0, 2.0])], r"item 0: expected \(str, Tensor\), got \(str, list\)"),
        ([("w",)], "item 0: expected a .name, tensor. pair"),
    ],
)
def test_anything_but_name_tensor_pairs_is_refused(obj, message):
    with pytest.raises(ValueError, match=message):
        decode_named_tensors(None, b64_dump(obj))


def test_not_base64_is_refused():
    with pytest.raises(ValueError, match="not valid base64"):
        decode_named_tensors(None, "%%%")


@pytest.fixture
def sglang_metadata(monkeypatch):
    """SGLang 0.5.23's FlattenedTensorMetadata, under its own module name, so that a pickle of it
    names the global a real SGLang sender's does (sglang itself is not installed here)."""

    @dataclass
    class FlattenedTensorMetadata:
        name: str
        shape: torch.Size
        dtype: torch.dtype
        start_idx: int
        end_idx: int
        numel: int

    module = types.ModuleType("sglang.srt.weight_sync.tensor_bucket")
    FlattenedTensorMetadata.__module__ = module.__name__
    FlattenedTensorMetadata.__qualname__ = "FlattenedTensorMetadata"
    module.FlattenedTensorMetadata = FlattenedTensorMetadata
    for name in ("sglang", "sglang.srt", "sglang.srt.weight_sync"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, module.__name__, module)
    return FlattenedTensorMetadata


def flattened(named, meta_cls) -> dict:
    """As SGLang's FlattenedTensorBucket lays it out: bytes back to back, byte indices."""
    parts, metadata, offset = [], [], 0
    for name, tensor in named:
        raw = tensor.contiguous().flatten().view(torch.uint8)
        metadata.append(meta_cls(name, tensor.shape, tensor.dtype, offset, offset + raw.numel(), raw.numel()))
        parts.append(raw)
        offset += raw.numel()
    return {"flattened_tensor": torch.cat(parts), "metadata": metadata}


def test_flattened_bucket_as_sglang_lays_it_out(sglang_metadata):
    # SGLang packs without padding: each offset must suit its dtype, as the sender's order does here.
    named = dict(bucket())
    sent = [(n, named[n]) for n in ("ids", "w", "empty", "half")]
    with file_system_sharing():
        payload = b64_dump(flattened(sent, sglang_metadata))
    received = unpack_named_tensors("flattened_bucket", payload)
    assert [n for n, _ in received] == [n for n, _ in sent]
    for (_, want), (_, got) in zip(sent, received):
        assert got.dtype == want.dtype and torch.equal(got, want)


def test_flattened_bucket_with_a_range_that_does_not_fit_names_the_tensor(sglang_metadata):
    obj = flattened([("w", torch.ones(4))], sglang_metadata)
    obj["metadata"][0].end_idx = 12  # 3 floats' bytes for a shape of 4
    with file_system_sharing():
        payload = b64_dump(obj)
    with pytest.raises(ValueError, match=r"flattened_bucket: tensor 'w': bytes \[0, 12\) do not hold \[4\]"):
        unpack_named_tensors("flattened_bucket", payload)
