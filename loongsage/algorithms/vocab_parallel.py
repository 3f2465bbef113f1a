"""Per-token log-probs and entropy from vocab-parallel logits: each tensor-parallel rank holds
the columns [vocab_start, vocab_start + V_local) of the logits, and no rank ever builds a
[tokens x full vocabulary] tensor.

Forward: the max over the vocabulary is all-reduced (MAX), then the sums over each shard
(sum of exp, the target's logit on the rank that owns it, entropy's sum of p * log p) are
all-reduced (SUM) once for the whole batch; the [T, V_local] work goes one sequence at a
time, as in losses.py.

Backward needs no collective. Every TP rank computes the same loss from the same reduced
values, so the gradient arriving at the [B, T] outputs is already the whole dL/d(output) on
each rank, and the derivative of an output with respect to a shard's logits depends only on
that shard and on replicated per-token values (logsumexp, entropy):
    d log p(t) / dz_k = [k == t] - p_k        dH / dz_k = -p_k (log p_k + H)
So each quantity is one autograd.Function with its derivative written out. Composing the
reductions from differentiable ops instead has two traps: an all-reduce whose backward
all-reduces the gradient again (torch.distributed.nn's) multiplies it by the TP size, since
every rank already holds the full one; and even an identity backward (megatron's
reduce_from_tensor_model_parallel_region) is wrong as soon as a reduced value flows back into
per-shard math, as the logsumexp does in p = exp(z - lse), because each rank would then see
only its own shard's share of d loss / d lse. The written-out backward also keeps nothing for
backward but the logits shard itself and [B, T] vectors; the softmax is recomputed per row.

With no group (or a 1-rank group) the logits are the whole vocabulary and the full-vocab
functions of losses.py are the implementation: no second copy of them here.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor
from torch.autograd.function import once_differentiable

from loongsage.algorithms.losses import _check_logits, entropy_from_logits, token_logprobs


def vocab_parallel_token_logprobs(
    logits_shard: Tensor, targets: Tensor, vocab_start: int, group: dist.ProcessGroup | None
) -> Tensor:
    """log p(targets) [B, T] fp32 from this rank's logits shard [B, T, V_local].

    Every rank of `group` must call it together, with the same `targets` and its own
    `vocab_start`; every rank gets the same result. Differentiable with respect to
    `logits_shard`: its gradient is the full-vocabulary gradient's columns of this shard.
    `group=None` means the logits are the whole vocabulary (vocab_start must be 0).
    Raises ValueError, on every rank, when some target lies in no rank's shard.
    """
    _check_logits(logits_shard, targets)
    if _world(group) == 1:
        if vocab_start != 0:
            raise ValueError(f"without tensor parallelism the logits are the whole vocabulary; vocab_start={vocab_start}, not 0")
        return token_logprobs(logits_shard, targets)
    return _VocabParallelLogprobs.apply(logits_shard, targets, vocab_start, group)


def vocab_parallel_entropy(logits_shard: Tensor, group: dist.ProcessGroup | None) -> Tensor:
    """Entropy (nats) [B, T] fp32 of softmax over the whole vocabulary, from this rank's
    logits shard [B, T, V_local]; every rank of `group` calls it together and gets the same
    result. A -inf logit (a padded vocabulary column) adds 0, not NaN. Differentiable as
    vocab_parallel_token_logprobs is; `group=None` means the logits are the whole vocabulary.
    """
    if logits_shard.dim() != 3:
        raise ValueError(f"logits must be [B, T, V_local]; got {tuple(logits_shard.shape)}")
    if _world(group) == 1:
        return entropy_from_logits(logits_shard)
    return _VocabParallelEntropy.apply(logits_shard, group)


def vocab_parallel_logits_at(logits_shard: Tensor, ids: Tensor, vocab_start: int, group: dist.ProcessGroup | None) -> Tensor:
    """The logits [B, T, K] fp32 at token ids `ids` [B, T, K] (e.g. a teacher's top-k), each taken
    from the rank whose shard holds it; every rank of `group` calls it together and gets the same
    result. Differentiable: each shard's gradient is the upstream gradient at the ids it holds.
    (An identity backward is right here, unlike for the log-sum-exp: the picked values flow only
    into math every rank repeats, so each rank already holds the whole gradient of them.)"""
    if ids.dim() != 3 or ids.shape[:2] != logits_shard.shape[:2]:
        raise ValueError(f"ids must be [B, T, K] over the logits' [B, T] {tuple(logits_shard.shape[:2])}; got {tuple(ids.shape)}")
    if _world(group) == 1:
        return logits_shard.float().gather(-1, ids.long())
    return _VocabParallelLogitsAt.apply(logits_shard, ids, vocab_start, group)


class _VocabParallelLogitsAt(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits_shard: Tensor, ids: Tensor, vocab_start: int, group: dist.ProcessGroup) -> Tensor:
        local_vocab = logits_shard.shape[-1]
        local = ids.long() - vocab_start
        owned = (local >= 0) & (local < local_vocab)
        index = local.clamp(0, local_vocab - 1)
        picked = torch.where(owned, logits_shard.float().gather(-1, index), torch.zeros_like(index, dtype=torch.float32))
        dist.all_reduce(picked, op=dist.ReduceOp.SUM, group=group)
        ctx.save_for_backward(index, owned)
        ctx.shape, ctx.dtype = logits_shard.shape, logits_shard.dtype
        return picked

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: Tensor):
        index, owned = ctx.saved_tensors
        grad = torch.zeros(ctx.shape, dtype=torch.float32, device=grad_out.device)
        grad.scatter_add_(-1, index, torch.where(owned, grad_out, torch.zeros_like(grad_out)))
        return grad.to(ctx.dtype), None, None, None


class _VocabParallelLogprobs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits_shard: Tensor, targets: Tensor, vocab_start: int, group: dist.ProcessGroup) -> Tensor:
        local_vocab = logits_shard.shape[-1]
        local = targets.long() - vocab_start
        owned = (local >= 0) & (local < local_vocab)
        index = local.clamp(0, local_vocab - 1)
        lse_max = _global_max(logits_shard, group)
        # [sum of exp(z - max), target logit, number of ranks owning the target], one SUM for all.
        sums = logits_shard.new_zeros((3, *targets.shape), dtype=torch.float32)
        for b, row in enumerate(logits_shard):
            sums[0, b] = (row.float() - lse_max[b, :, None]).exp_().sum(dim=-1)
            sums[1, b] = row.gather(-1, index[b, :, None]).squeeze(-1).float()
        sums[1] = torch.where(owned, sums[1], torch.zeros_like(sums[1]))
        sums[2] = owned.float()
        dist.all_reduce(sums, op=dist.ReduceOp.SUM, group=group)
        unowned = sums[2] != 1
        if unowned.any():  # the same on every rank (reduced), so every rank raises: no rank hangs
            b, t = (int(i) for i in unowned.nonzero()[0])
            raise ValueError(
                f"target id {int(targets[b, t])} at [{b}, {t}] is owned by {int(sums[2, b, t])} vocabulary shards, not 1: "
                "targets must lie in [0, vocabulary size) and the shards must tile the vocabulary"
            )
        lse = lse_max + sums[0].log()
        ctx.save_for_backward(logits_shard, index, owned, lse)
        return sums[1] - lse

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: Tensor):
        # grad_out is the same on every TP rank (see the module docstring): no collective here.
        logits_shard, index, owned, lse = ctx.saved_tensors
        grad = torch.empty_like(logits_shard)
        picked = torch.where(owned, grad_out, torch.zeros_like(grad_out))
        for b, row in enumerate(logits_shard):
            probs = (row.float() - lse[b, :, None]).exp_()  # p over this shard; 0 at -inf logits
            row_grad = probs.mul_(-grad_out[b, :, None])  # -g p_k ...
            row_grad.scatter_add_(-1, index[b, :, None], picked[b, :, None])  # ... + g [k == target]
            grad[b] = row_grad
        return grad, None, None, None


class _VocabParallelEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits_shard: Tensor, group: dist.ProcessGroup) -> Tensor:
        lse_max = _global_max(logits_shard, group)
        floor = torch.finfo(torch.float32).min
        # [S = sum of exp(z - max), sum of exp(z - max) * (z - max)], one SUM for all.
        sums = logits_shard.new_zeros((2, *logits_shard.shape[:2]), dtype=torch.float32)
        for b, row in enumerate(logits_shard):
            shifted = row.float() - lse_max[b, :, None]
            weights = shifted.exp()
            sums[0, b] = weights.sum(dim=-1)
            # A -inf logit has weight 0; clamping keeps 0 * -inf at 0, not NaN (as losses.py does).
            sums[1, b] = weights.mul_(shifted.clamp_(min=floor)).sum(dim=-1)
        dist.all_reduce(sums, op=dist.ReduceOp.SUM, group=group)
        log_sum = sums[0].log()
        # H = -sum p (z - lse) with p = exp(z - max) / S and lse = max + log S.
        entropy = log_sum - sums[1] / sums[0]
        ctx.save_for_backward(logits_shard, lse_max + log_sum, entropy)
        return entropy

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: Tensor):
        # grad_out is the same on every TP rank (see the module docstring): no collective here.
        logits_shard, lse, entropy = ctx.saved_tensors
        floor = torch.finfo(torch.float32).min
        grad = torch.empty_like(logits_shard)
        for b, row in enumerate(logits_shard):
            logp = row.float() - lse[b, :, None]
            probs = logp.exp()
            # dH/dz_k = -p_k (log p_k + H); at a -inf logit p_k = 0 and the clamp keeps the product 0.
            scale = logp.clamp_(min=floor).add_(entropy[b, :, None])
            grad[b] = probs.mul_(scale).mul_(-grad_out[b, :, None])
        return grad, None


def _world(group: dist.ProcessGroup | None) -> int:
    return 1 if group is None else dist.get_world_size(group)


def _global_max(logits_shard: Tensor, group: dist.ProcessGroup) -> Tensor:
    """[B, T] fp32 max logit over the whole vocabulary. Not differentiated: the results are
    invariant to the shift (it only keeps exp from overflowing)."""
    with torch.no_grad():
        local = torch.stack([row.amax(dim=-1) for row in logits_shard]).float()
        dist.all_reduce(local, op=dist.ReduceOp.MAX, group=group)
    return local
