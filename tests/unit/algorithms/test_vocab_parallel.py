"""Vocab-parallel log-probs and entropy against the full-vocab ones of losses.py: in-process
without a group, and over real gloo process groups of 2 and 4 ranks (torch.multiprocessing
spawn), with even and uneven shards and -inf (padded) vocabulary columns."""

from __future__ import annotations

import datetime
import math

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from loongsage.algorithms.distill import gkd_divergence, topk_supports
from loongsage.algorithms.losses import entropy_from_logits, token_logprobs
from loongsage.algorithms.vocab_parallel import (
    vocab_parallel_entropy,
    vocab_parallel_logits_at,
    vocab_parallel_token_logprobs,
)

ENTROPY_COEF = 0.3
TOL = {"atol": 1e-6, "rtol": 1e-6}


def _problem(vocab: int, padded: int = 0, seed: int = 0):
    """Logits [3, 6, vocab + padded] (the padded columns -inf), targets in the real vocabulary,
    per-token advantages. The same on every rank (seeded)."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(3, 6, vocab + padded, generator=g) * 4
    logits[:, :, vocab:] = -math.inf
    targets = torch.randint(0, vocab, (3, 6), generator=g)
    advantages = torch.randn(3, 6, generator=g)
    return logits, targets, advantages


def _loss(logprobs, entropy, advantages):
    """What the policy objective differentiates: both quantities, advantage-weighted logprobs."""
    return (logprobs * advantages).sum() + ENTROPY_COEF * entropy.sum()


def _full_vocab(logits, targets, advantages):
    logits = logits.detach().clone().requires_grad_()
    logprobs, entropy = token_logprobs(logits, targets), entropy_from_logits(logits)
    _loss(logprobs, entropy, advantages).backward()
    return logprobs.detach(), entropy.detach(), logits.grad


# --- no group: the full-vocab functions are the implementation ---------------------------------


def test_without_group_results_and_gradients_are_the_full_vocab_ones():
    logits, targets, advantages = _problem(vocab=11, padded=3)
    want_lp, want_h, want_grad = _full_vocab(logits, targets, advantages)
    shard = logits.clone().requires_grad_()
    logprobs = vocab_parallel_token_logprobs(shard, targets, 0, None)
    entropy = vocab_parallel_entropy(shard, None)
    _loss(logprobs, entropy, advantages).backward()
    assert torch.equal(logprobs, want_lp) and torch.equal(entropy, want_h)
    assert torch.equal(shard.grad, want_grad)
    assert torch.isfinite(shard.grad).all() and (shard.grad[:, :, 11:] == 0).all()


def test_without_group_a_shard_offset_is_refused():
    logits, targets, _ = _problem(vocab=8)
    with pytest.raises(ValueError, match="vocab_start=4"):
        vocab_parallel_token_logprobs(logits, targets, 4, None)


def test_shapes_are_checked():
    logits, targets, _ = _problem(vocab=8)
    with pytest.raises(ValueError, match="targets"):
        vocab_parallel_token_logprobs(logits, targets[:, :-1], 0, None)
    with pytest.raises(ValueError, match=r"\[B, T, V_local\]"):
        vocab_parallel_entropy(logits[0], None)


# --- real process groups -------------------------------------------------------------------------


def _rank_main(rank: int, bounds: list[int], padded: int, store: str) -> None:
    world = len(bounds) - 1
    dist.init_process_group(
        "gloo", init_method=f"file://{store}", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60)
    )
    try:
        _rank_checks(rank, bounds, padded, dist.group.WORLD)
    finally:
        dist.destroy_process_group()


def _rank_checks(rank: int, bounds: list[int], padded: int, group) -> None:
    torch.set_num_threads(1)
    lo, hi = bounds[rank], bounds[rank + 1]
    logits, targets, advantages = _problem(vocab=bounds[-1] - padded, padded=padded)
    # One position where rank 0's whole shard is -inf: its local max is -inf, the global one is not.
    logits[1, 2, : bounds[1]] = -math.inf
    targets[1, 2] = bounds[-1] - padded - 1
    want_lp, want_h, want_grad = _full_vocab(logits, targets, advantages)

    # fp32: values and this shard's gradient of a loss that uses both.
    shard = logits[:, :, lo:hi].clone().requires_grad_()
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        logprobs = vocab_parallel_token_logprobs(shard, targets, lo, group)
        entropy = vocab_parallel_entropy(shard, group)
    # Kept for backward: the shard itself and [B, T] vectors, no [T, V_local] intermediate.
    assert saved and all(t.data_ptr() == shard.data_ptr() or t.numel() <= targets.numel() for t in saved)
    assert logprobs.dtype == entropy.dtype == torch.float32
    torch.testing.assert_close(logprobs, want_lp, **TOL)
    torch.testing.assert_close(entropy, want_h, **TOL)
    _loss(logprobs, entropy, advantages).backward()
    torch.testing.assert_close(shard.grad, want_grad[:, :, lo:hi], **TOL)
    assert torch.isfinite(shard.grad).all()
    real_hi = bounds[-1] - padded
    if lo < real_hi:  # the comparison is not between two zero tensors
        assert shard.grad.abs().max() > 1e-3
    if hi > real_hi:  # padded columns: no probability, no gradient
        assert (shard.grad[:, :, max(lo, real_hi) - lo :] == 0).all()

    # The entropy alone (entropy_coef > 0 path): its gradient, separately from the logprobs'.
    shard.grad = None
    vocab_parallel_entropy(shard, group).sum().backward()
    full = logits.clone().requires_grad_()
    entropy_from_logits(full).sum().backward()
    torch.testing.assert_close(shard.grad, full.grad[:, :, lo:hi], **TOL)

    # Under no_grad (entropy as a metric): same values, no graph.
    with torch.no_grad():
        metric = vocab_parallel_entropy(shard, group)
    assert metric.grad_fn is None
    torch.testing.assert_close(metric, want_h, **TOL)

    # bf16 logits: upcast to fp32 one row at a time, the gradient back in bf16.
    low = logits.bfloat16()
    want_lp16, want_h16, want_grad16 = _full_vocab(low, targets, advantages)
    shard16 = low[:, :, lo:hi].clone().requires_grad_()
    logprobs16 = vocab_parallel_token_logprobs(shard16, targets, lo, group)
    entropy16 = vocab_parallel_entropy(shard16, group)
    assert logprobs16.dtype == entropy16.dtype == torch.float32
    torch.testing.assert_close(logprobs16, want_lp16, **TOL)
    torch.testing.assert_close(entropy16, want_h16, **TOL)
    _loss(logprobs16, entropy16, advantages).backward()
    assert shard16.grad.dtype == torch.bfloat16
    torch.testing.assert_close(shard16.grad, want_grad16[:, :, lo:hi])  # bf16 tolerances: one rounding apart at most

    # A target no shard owns: every rank raises (none is left waiting in a collective) ...
    bad = targets.clone()
    bad[2, 5] = bounds[-1]
    with pytest.raises(ValueError, match=r"target id \d+ at \[2, 5\] is owned by 0 vocabulary shards"):
        vocab_parallel_token_logprobs(shard.detach(), bad, lo, group)
    # ... and the group still works in step afterwards.
    torch.testing.assert_close(vocab_parallel_token_logprobs(shard.detach(), targets, lo, group), want_lp, **TOL)

    # GKD over a teacher's top-k: the student's logits at the teacher's ids, each from the shard
    # that holds it, renormalised there, give the full-vocabulary divergence and this shard's
    # part of its gradient.
    teacher = torch.randn(logits[..., :real_hi].shape, generator=torch.Generator().manual_seed(5)).log_softmax(-1)
    teacher[1, 2, : bounds[1]] = -math.inf  # where the student has no probability either
    top_lp, top_ids = teacher.topk(4, dim=-1)
    shard.grad = None
    picked = vocab_parallel_logits_at(shard, top_ids, lo, group)
    gkd_divergence(picked.log_softmax(-1), top_lp.log_softmax(-1), "jsd").sum().backward()
    full = logits.clone().requires_grad_()
    gkd_divergence(*topk_supports(full, top_ids, top_lp), "jsd").sum().backward()
    torch.testing.assert_close(picked, logits.gather(-1, top_ids), **TOL)
    torch.testing.assert_close(shard.grad, full.grad[:, :, lo:hi], **TOL)
    if lo < real_hi:
        assert shard.grad.abs().max() > 1e-4

    # A real 1-rank group: the logits are the whole vocabulary, and the full-vocab functions answer.
    singles = [dist.new_group([r]) for r in range(dist.get_world_size())]
    assert torch.equal(vocab_parallel_token_logprobs(logits, targets, 0, singles[rank]), want_lp)
    assert torch.equal(vocab_parallel_entropy(logits, singles[rank]), want_h)


@pytest.mark.parametrize(
    ("bounds", "padded"),
    [
        pytest.param([0, 32, 64], 0, id="2-ranks-even"),
        pytest.param([0, 9, 32], 7, id="2-ranks-uneven-padded"),
        pytest.param([0, 5, 6, 20, 32], 13, id="4-ranks-uneven-last-shard-all-padding"),
    ],
)
def test_vocab_parallel_matches_full_vocab_over_gloo(tmp_path, bounds, padded):
    # Each rank asserts on its own shard; a failing rank's traceback comes back through spawn.
    mp.spawn(_rank_main, args=(bounds, padded, str(tmp_path / "store")), nprocs=len(bounds) - 1, join=True)
