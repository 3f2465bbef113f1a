from __future__ import annotations

import multiprocessing as mp

import pytest
import torch

from loongsage.inference.weight_wire.unpack import unpack_named_tensors
from loongsage.transfer import iter_buckets
from loongsage.transfer.transports import PACKERS


def named(*shapes_and_dtypes):
    return [
        (f"p{i}", torch.arange(torch.Size(shape).numel(), dtype=torch.float32).reshape(shape).to(dtype))
        for i, (shape, dtype) in enumerate(shapes_and_dtypes)
    ]


def test_buckets_respect_the_budget_and_keep_order():
    tensors = named(((10,), torch.float32), ((10,), torch.float32), ((30,), torch.float32), ((5,), torch.float32))
    buckets = list(iter_buckets(tensors, bucket_bytes=80))
    assert [[n for n, _ in b] for b in buckets] == [["p0", "p1"], ["p2"], ["p3"]]  # 40+40 | 120 alone | 20


def test_bucket_budget_must_be_positive():
    with pytest.raises(ValueError, match="bucket_bytes"):
        list(iter_buckets(named(((2,), torch.float32)), 0))


@pytest.mark.parametrize("transport", sorted(PACKERS))
def test_round_trip_keeps_names_dtypes_shapes_values(transport):
    tensors = named(((3, 5), torch.float32), ((7,), torch.bfloat16), ((0,), torch.float32), ((2, 2, 3), torch.float16))
    with PACKERS[transport](tensors) as payload:
        received = unpack_named_tensors(transport, payload)
    assert [n for n, _ in received] == [n for n, _ in tensors]
    for (_, sent), (_, got) in zip(tensors, received):
        assert got.dtype == sent.dtype and torch.equal(got, sent)


def _receive_in_child(payload, queue):
    queue.put([(n, t.tolist()) for n, t in unpack_named_tensors("shm", payload)])


def test_shared_memory_reaches_another_process():
    tensors = named(((4,), torch.float32), ((2, 3), torch.float32))
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    with PACKERS["shm"](tensors) as payload:
        child = ctx.Process(target=_receive_in_child, args=(payload, queue))
        child.start()
        received = queue.get(timeout=60)
        child.join(timeout=60)
    assert child.exitcode == 0
    assert received == [(n, t.tolist()) for n, t in tensors]


def test_unknown_load_format_names_the_choices():
    with pytest.raises(ValueError, match=r"load_format 'nccl' is not supported.*inline.*shm"):
        unpack_named_tensors("nccl", {"tensors": []})


def test_malformed_payload_is_refused():
    with pytest.raises(ValueError, match="tensors"):
        unpack_named_tensors("inline", {"data": ""})


def test_shared_memory_refuses_engines_on_other_machines_before_sending():
    from loongsage.transfer.push import check_reach

    here = "10.0.0.1"
    check_reach("shm", ["http://127.0.0.1:3000", "http://localhost:3001", f"http://{here}:3002"], here)
    check_reach("inline", ["http://10.0.0.2:3000"], here)  # over HTTP: any machine
    with pytest.raises(
        ValueError,
        match=r"weight_sync=shm .* http://10.0.0.2:3000 are on other machines: "
        r"set trainer.weight_sync=mesh \(it picks a transport per engine\), or nccl \(GPU\) / gloo \(CPU\)",
    ):
        check_reach("shm", ["http://127.0.0.1:3000", "http://10.0.0.2:3000"], here)
