"""Step metrics accumulated over micro-batches and reduced over ranks."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor

from loongsage.algorithms.losses import mismatch_k3_kl
from loongsage.training.batch import PackedBatch
from loongsage.training.objective import MicroObjective
from loongsage.training.routing_replay import RoutingCount


class StepMetrics:
    """Per-rank shares of the step's metrics, summed over ranks at the end.

    Every entry is pre-weighted by its share of the global batch, so the all-reduced sum
    is the global value and every rank returns the same metrics.
    """

    # Importance-weight stats that are token means: summed like clip_frac.
    IS_MEANS = ("is_weight_mean", "is_clip_frac", "is_mask_frac")
    KEYS = (
        "loss",
        "pg_loss",
        "entropy",
        "clip_frac",
        "kl",
        "distill",
        "distill_tokens",
        "mismatch_k3_kl",
        "mismatch_tokens",
        "tokens",
        "routing_mismatched",
        "routing_compared",
        "stale_filtered",
        "stale_considered",
        *IS_MEANS,
    )

    def __init__(self, with_kl: bool, with_is: bool = False, group: dist.ProcessGroup | None = None, with_stale: bool = False):
        """`group`: the data-parallel ranks the batch is spread over (None: all ranks); `with_stale`:
        report train/stale_filtered_frac (algorithm.stale_filter)."""
        self.group = group
        self.with_stale = with_stale
        self.values = dict.fromkeys(self.KEYS, 0.0)
        self.grad_norm = 0.0
        self.with_kl, self.with_is = with_kl, with_is
        # Extremes of the importance weights over micro-batches with trained tokens; none: 0.0.
        self.is_max, self.is_min = -float("inf"), float("inf")

    def add_micro(
        self, micro: PackedBatch, result: MicroObjective, old: Tensor | None, weight: float, token_weight: float
    ) -> None:
        v = self.values
        v["loss"] += result.loss.item() * weight
        v["pg_loss"] += result.pg_loss * weight
        v["kl"] += result.kl * weight
        v["distill"] += result.distill * weight
        if micro.teacher_mask is not None:
            v["distill_tokens"] += float((micro.loss_mask * micro.teacher_mask).sum())
        v["entropy"] += result.entropy * weight
        v["clip_frac"] += result.clip_frac * token_weight
        tokens = float(micro.loss_mask.sum())
        v["tokens"] += tokens
        v["stale_filtered"] += result.stale_filtered
        v["stale_considered"] += tokens
        if result.is_stats:
            self._add_is(result.is_stats, token_weight, tokens)
        if micro.rollout_logprobs is None:
            return
        train_logprobs = result.logprobs if old is None else old
        v["mismatch_k3_kl"] += mismatch_k3_kl(train_logprobs, micro.rollout_logprobs, micro.loss_mask).item() * tokens
        v["mismatch_tokens"] += tokens

    def add_stale_masked(self, tokens: float) -> None:
        """Trained tokens taken out of the loss masks before the step (m2po): filtered, and considered."""
        self.values["stale_filtered"] += tokens
        self.values["stale_considered"] += tokens

    def add_routing(self, count: RoutingCount) -> None:
        """Token x layer top-k sets the trainer routed otherwise than the engine, over those compared."""
        self.values["routing_mismatched"] += count.mismatched
        self.values["routing_compared"] += count.compared

    def _add_is(self, stats: dict[str, float], token_weight: float, tokens: float) -> None:
        for key in self.IS_MEANS:
            self.values[key] += stats[key] * token_weight
        if tokens > 0:
            self.is_max = max(self.is_max, stats["is_weight_max"])
            self.is_min = min(self.is_min, stats["is_weight_min"])

    def reduce(self, num_minis: int, lr: float) -> dict[str, float]:
        totals = torch.tensor([self.values[key] for key in self.KEYS], dtype=torch.float64)
        dist.all_reduce(totals, group=self.group)
        total = dict(zip(self.KEYS, totals.tolist()))
        metrics = {
            "train/loss": total["loss"] / num_minis,
            "train/pg_loss": total["pg_loss"] / num_minis,
            "train/entropy": total["entropy"] / num_minis,
            "train/clip_frac": total["clip_frac"] / num_minis,
            "train/grad_norm": self.grad_norm / num_minis,
            "train/lr": lr,
            "train/tokens": total["tokens"],
        }
        # Only over micro-batches whose samples all carry rollout logprobs.
        if total["mismatch_tokens"] > 0:
            metrics["train/mismatch_k3_kl"] = total["mismatch_k3_kl"] / total["mismatch_tokens"]
        if total["routing_compared"] > 0:
            metrics["train/routing_mismatch"] = total["routing_mismatched"] / total["routing_compared"]
        if self.with_kl:
            metrics["train/kl"] = total["kl"] / num_minis
        # GKD (algorithm.opd.style=gkd): the divergence to the teachers over the tokens they scored.
        if total["distill_tokens"] > 0:
            metrics["train/gkd_divergence"] = total["distill"] / num_minis
        if self.with_is:
            metrics.update(self._reduce_is(total, num_minis))
        if self.with_stale:
            metrics["train/stale_filtered_frac"] = total["stale_filtered"] / max(total["stale_considered"], 1.0)
        return metrics

    def _reduce_is(self, total: dict[str, float], num_minis: int) -> dict[str, float]:
        # Max of the ranks' maxima and min of their minima, in one MAX reduce.
        extremes = torch.tensor([self.is_max, -self.is_min], dtype=torch.float64)
        dist.all_reduce(extremes, op=dist.ReduceOp.MAX, group=self.group)
        is_max, is_min = extremes[0].item(), -extremes[1].item()
        metrics = {f"train/{key}": total[key] / num_minis for key in self.IS_MEANS}
        metrics["train/is_weight_max"] = is_max if is_max > -float("inf") else 0.0
        metrics["train/is_weight_min"] = is_min if is_min < float("inf") else 0.0
        return metrics
