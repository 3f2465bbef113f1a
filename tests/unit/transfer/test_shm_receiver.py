"""The receiving half of shared memory: views into the sender's segment (no copy until the
receiver copies them where they go), mappings kept by segment name across buckets and pushes,
and dropped once the sender unlinks or replaces a segment; the bounds of a table of contents
checked against the buffer; memmove and torch copies agreeing."""

from __future__ import annotations

from multiprocessing import shared_memory

import pytest
import torch

from loongsage.inference.weight_wire.layout import copy_bytes, table_of_contents, view_flat, write_flat
from loongsage.inference.weight_wire.shm_segments import ATTACHED, AttachedSegments, unpack_shm
from loongsage.inference.weight_wire.unpack import open_named_tensors
from loongsage.transfer.transports import pack_shm


def named():
    return [("a", torch.arange(12, dtype=torch.float32).reshape(3, 4)), ("b", torch.arange(5, dtype=torch.bfloat16))]


def test_views_read_the_segment_itself_and_match_a_copying_unpack():
    tensors = named()
    with pack_shm(tensors) as payload:
        copied = unpack_shm(payload)
        with open_named_tensors("shm", payload) as (views, owned):
            assert not owned
            assert [(n, t.dtype, t.shape) for n, t in views] == [(n, t.dtype, t.shape) for n, t in tensors]
            assert all(torch.equal(v, t) for (_, v), (_, t) in zip(views, tensors))
            mapping = ATTACHED.open(payload["shm_name"])
            segment = torch.frombuffer(mapping, dtype=torch.uint8)
            assert views[0][1].data_ptr() == segment.data_ptr()  # a view, not a copy
            del segment
        assert all(torch.equal(c, t) for (_, c), (_, t) in zip(copied, tensors))


def test_other_formats_hand_over_tensors_of_their_own():
    from loongsage.transfer.transports import pack_inline

    with pack_inline(named()) as payload, open_named_tensors("inline", payload) as (received, owned):
        assert owned and torch.equal(received[0][1], named()[0][1])


def test_a_mapping_is_kept_by_name_and_dropped_when_the_segment_goes_or_is_replaced():
    attached = AttachedSegments(keep=2)
    segments = [shared_memory.SharedMemory(create=True, size=4096) for _ in range(3)]
    try:
        first = attached.open(segments[0].name)
        assert attached.open(segments[0].name) is first  # the same mapping, bucket after bucket
        attached.open(segments[1].name)
        attached.open(segments[2].name)
        assert len(attached) == 2  # at most `keep`: the least recently used went
        segments[1].close()
        segments[1].unlink()
        attached.prune()  # the sender unlinked it: our mapping would keep its memory alive
        assert len(attached) == 1
        name = segments[2].name
        segments[2].close()
        segments[2].unlink()
        again = shared_memory.SharedMemory(name=name, create=True, size=8192)  # the same name, a new file
        segments[2] = again
        assert len(attached.open(name)) == 8192
        with pytest.raises(FileNotFoundError):
            attached.open(segments[1].name)
        attached.clear()
        assert len(attached) == 0
    finally:
        for segment in segments[:1] + segments[2:]:
            segment.close()
            segment.unlink()


def test_a_table_of_contents_reaching_past_the_buffer_is_refused():
    tensors = named()
    entries, total = table_of_contents(tensors)
    flat = torch.zeros(total, dtype=torch.uint8)
    write_flat(tensors, flat, entries)
    assert all(torch.equal(v, t) for (_, v), (_, t) in zip(view_flat(flat, entries), tensors))
    with pytest.raises(ValueError, match="outside"):
        view_flat(flat[:10], entries)
    with pytest.raises(ValueError, match="shape"):
        view_flat(flat, [{**entries[0], "shape": [7]}])
    with pytest.raises(ValueError, match="non-negative"):
        view_flat(flat, [{**entries[0], "offset": -64}])


@pytest.mark.parametrize(
    "src",
    [
        torch.arange(10, dtype=torch.float32),  # contiguous, same dtype: memmove
        torch.arange(20, dtype=torch.float32)[::2],  # strided: torch's copy
        torch.arange(10, dtype=torch.float64),  # another dtype: converted
        torch.zeros(0),
    ],
)
def test_copy_bytes_matches_torch_copy(src):
    dst = torch.full(src.shape, -1.0)
    copy_bytes(dst, src)
    assert torch.equal(dst, src.float())


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_a_bucket_written_by_several_threads_is_the_same_bytes(threads):
    tensors = [(f"t{i}", torch.randn(n)) for i, n in enumerate((1000, 3, 0, 70001, 17))]
    tensors.append(("strided", torch.randn(40)[::2]))
    entries, total = table_of_contents(tensors)
    flat = torch.zeros(total, dtype=torch.uint8)
    write_flat(tensors, flat, entries, threads=threads)
    assert all(torch.equal(v, t) for (_, v), (_, t) in zip(view_flat(flat, entries), tensors))


def test_the_stream_tells_the_channel_which_buckets_come_last():
    from loongsage.transfer.push import _looking_ahead

    assert list(_looking_ahead(iter("abcd"), 2)) == [("a", None), ("b", None), ("c", 1), ("d", 0)]
    assert list(_looking_ahead(iter("a"), 2)) == [("a", 0)]


def test_shm_packs_the_first_bucket_with_both_cores_and_lets_receivers_copy_the_last_ones_so():
    from loongsage.transfer.channel import TensorChannel

    channel = TensorChannel("shm", [], [])
    try:
        first = channel.pack(named(), following=None)
        middle = channel.pack(named(), following=2)
        last = channel.pack(named(), following=1)
        assert [packed[1]()["copy_threads"] for packed in (first, middle, last)] == [1, 1, 2]
        for packed in (first, middle, last):
            channel.release(packed)
        assert channel._packed == 0
    finally:
        channel.close()
