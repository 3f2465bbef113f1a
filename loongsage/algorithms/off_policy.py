"""Off-policy corrections for tokens sampled by older weights than the trainer's.

Three policies meet in asynchronous training: the behaviour policy (the engine's weights
that sampled each token, logprobs recorded at rollout), the proximal policy (the anchor of
the PPO trust region) and the policy being trained. Decoupled PPO clips the ratio
pi_theta / pi_prox and corrects for pi_prox != pi_behav with the importance weight
pi_prox / pi_behav computed here.

All per-token tensors are [B, T]; `mask` is 1 where a token is trained. Pure tensor code:
no Ray, HTTP or config.
"""

from __future__ import annotations

import torch
from torch import Tensor

IS_LEVELS = ("none", "token", "sequence", "geometric")
IS_MODES = ("truncate", "mask")

# exp(20) ~ 4.9e8: far past any sensible truncation, far below float32 overflow even
# when a sequence-level weight sums thousands of token log-ratios.
MAX_LOG_RATIO = 20.0


def importance_weights(
    proximal_logprobs: Tensor,
    behaviour_logprobs: Tensor,
    mask: Tensor,
    level: str = "token",
    mode: str = "truncate",
    low: float = 0.0,
    high: float = 2.0,
) -> tuple[Tensor, dict[str, float]]:
    """Detached weights w = pi_prox / pi_behav, [B, T] float32, and their statistics.

    level  token:     one weight per token
           sequence:  exp of the sequence's summed log-ratio, on all its tokens (unbiased
                      for sequence-level rewards, but high variance on long responses)
           geometric: exp of the sequence's mean log-ratio (length-normalised)
           none:      all ones (no correction)
    mode   truncate:  w = min(w, high) (TIS; `low` unused)
           mask:      w where low <= w <= high, else 0 (MIS: the token or sequence is
                      left out of the gradient instead of biased toward the bound)

    Stats (masked-token means over the batch; 0.0 when nothing is masked in):
    is_weight_mean/max/min of the weights before truncation or masking, is_clip_frac the
    fraction of tokens truncated, is_mask_frac the fraction masked out.
    """
    _check_name("importance sampling level", level, IS_LEVELS)
    _check_name("importance sampling mode", mode, IS_MODES)
    keep = mask.bool()
    with torch.no_grad():
        # where(), not * mask: padding may hold anything, and it must not leak into the sums.
        log_ratio = torch.where(keep, proximal_logprobs.float() - behaviour_logprobs.float(), 0.0)
        log_ratio = _at_level(log_ratio, keep, level)
        raw = torch.exp(log_ratio.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO))
        if mode == "truncate":
            weights = raw.clamp(max=high)
            clipped, dropped = raw > high, torch.zeros_like(keep)
        else:
            inside = (raw >= low) & (raw <= high)
            weights = torch.where(inside, raw, torch.zeros_like(raw))
            clipped, dropped = torch.zeros_like(keep), ~inside
    return weights, _stats(raw, clipped, dropped, keep)


def interpolated_proximal_logprobs(
    behaviour_logprobs: Tensor,
    current_logprobs: Tensor,
    token_versions: Tensor,
    proximal_version: float,
    current_version: float,
) -> Tensor:
    """Proximal-policy logprobs without a forward pass of the proximal weights (AReaL).

    Assumes a token's log-prob moves linearly in the weight version between the version
    that sampled it (v_behav = token_versions) and the weights being trained
    (current_version), so at proximal_version

        log pi_prox ~= log pi_behav + alpha * (log pi_cur - log pi_behav),
        alpha = (proximal_version - v_behav) / (current_version - v_behav), in [0, 1].

    Versions may be fractional: mid-step the trainer's weights sit between two published
    versions. A token sampled by the current weights (current_version == v_behav) takes
    the current logprobs. The result is detached: the proximal policy is a constant anchor.
    """
    # float64: version numbers grow large while their differences stay small fractions.
    v_behav = token_versions.double()
    span = current_version - v_behav
    same = span == 0
    alpha = (proximal_version - v_behav) / torch.where(same, torch.ones_like(span), span)
    alpha = torch.where(same, torch.ones_like(alpha), alpha.clamp(0.0, 1.0)).float()
    behaviour, current = behaviour_logprobs.float().detach(), current_logprobs.float().detach()
    return behaviour + alpha * (current - behaviour)


def _at_level(log_ratio: Tensor, keep: Tensor, level: str) -> Tensor:
    if level == "none":
        return torch.zeros_like(log_ratio)
    if level == "token":
        return log_ratio
    per_sequence = log_ratio.sum(dim=-1, keepdim=True)
    if level == "geometric":
        # A sequence without trained tokens gets 0 / 1 = 0, a weight of 1 it never uses.
        per_sequence = per_sequence / keep.sum(dim=-1, keepdim=True).clamp(min=1)
    return per_sequence.expand_as(log_ratio)


def _stats(raw: Tensor, clipped: Tensor, dropped: Tensor, keep: Tensor) -> dict[str, float]:
    count = int(keep.sum())
    if count == 0:
        return dict.fromkeys(("is_weight_mean", "is_weight_max", "is_weight_min", "is_clip_frac", "is_mask_frac"), 0.0)
    kept = raw[keep]
    return {
        "is_weight_mean": kept.mean().item(),
        "is_weight_max": kept.max().item(),
        "is_weight_min": kept.min().item(),
        "is_clip_frac": (clipped & keep).sum().item() / count,
        "is_mask_frac": (dropped & keep).sum().item() / count,
    }


def _check_name(what: str, name: str, valid: tuple[str, ...]) -> None:
    if name not in valid:
        raise ValueError(f"unknown {what} {name!r}; valid: {', '.join(valid)}")
