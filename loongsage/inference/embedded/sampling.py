"""Per-request sampling parameters and one batched sampling step.

Sampling is the exponential race (Gumbel-max) done in two levels: pick a block of the
vocabulary with probability equal to its mass, then a token inside it, each by
argmax(p / E) with E ~ Exp(1) drawn from the row's own generator. That is exact sampling
from p, needs only ~2*sqrt(V) random numbers per row instead of V, and makes a seeded request
pick the same tokens alone or in a batch: the float noise between batched and unbatched
matmuls (~1e-6 relative) would have to beat the gap between the two best perturbed scores.
(Inverse-CDF sampling with one uniform per row flips tokens far more often, since a cumulative
sum over the whole vocabulary amplifies that noise.)

Logprobs reported are those of the *untempered* model distribution (temperature 1, no top-p /
top-k), which is what the trainer recomputes; they are not the probabilities the token was
drawn with when temperature != 1 or top-p/top-k truncate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from loongsage.sampling import DEFAULT_MAX_NEW_TOKENS


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0  # 0 = greedy
    top_p: float = 1.0
    top_k: int = -1  # -1 = whole vocabulary
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    stop: tuple[str, ...] = ()
    # Stops in addition to the model's eos ids (SGLang semantics); `ignore_eos` drops the latter.
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    no_stop_trim: bool = False
    sampling_seed: int | None = None


def block_size(vocab: int) -> int:
    return max(1, math.isqrt(vocab - 1) + 1)


def noise_size(vocab: int) -> int:
    """Exp(1) draws a non-greedy row needs per sampled token."""
    size = block_size(vocab)
    return -(-vocab // size) + size


def sample_tokens(
    logits: torch.Tensor, temperature: torch.Tensor, top_p: torch.Tensor, top_k: torch.Tensor, exp_noise: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [B, V] fp32; per-row temperature/top_p/top_k [B]; exp_noise [B, noise_size(V)]
    of Exp(1) draws (ignored on greedy rows) -> (token ids [B], their untempered logprobs [B]).

    The untempered exp(logits - max) serves both the logprobs' normaliser and, on the common
    temperature-1 untruncated rows, the race itself (which only needs probabilities up to a
    per-row factor): one pass over [B, V] fewer than a softmax plus a separate logsumexp.
    """
    rows, vocab = logits.shape
    size = block_size(vocab)
    # The race views the vocabulary as whole blocks: write the weights straight into a buffer
    # whose tail is the zero padding instead of padding a copy afterwards.
    padded = logits.new_empty(rows, -(-vocab // size) * size)
    padded[:, vocab:] = 0
    weights = padded[:, :vocab]
    shifted = logits - logits.amax(-1, keepdim=True)
    torch.exp(shifted, out=weights)
    log_norm = weights.sum(-1).log()
    # The shifted logits (max 0) temper without overflow: logits / 1e-45 would be +-inf, and a
    # softmax over those NaN, which took the whole batch's step down with it.
    tokens = _pick(shifted, padded, temperature, top_p, top_k, exp_noise)
    return tokens, shifted.gather(-1, tokens[:, None])[:, 0] - log_norm


def _pick(
    logits: torch.Tensor,
    padded: torch.Tensor,
    temperature: torch.Tensor,
    top_p: torch.Tensor,
    top_k: torch.Tensor,
    exp_noise: torch.Tensor,
) -> torch.Tensor:
    """`padded` holds the untempered weights; rows that temper or truncate overwrite them."""
    greedy = temperature <= 0
    if bool(greedy.all()):
        return logits.argmax(-1)
    truncate = bool((top_k > 0).any()) or bool((top_p < 1).any())
    if truncate or bool((temperature[~greedy] != 1).any()):
        scaled = logits / torch.where(greedy, torch.ones_like(temperature), temperature)[:, None]
        if truncate:
            scaled = _truncate(scaled, top_p, top_k)
        padded[:, : logits.shape[1]] = scaled.softmax(-1)
    sampled = _exponential_race(padded, block_size(logits.shape[1]), exp_noise)
    return torch.where(greedy, logits.argmax(-1), sampled) if bool(greedy.any()) else sampled


def _exponential_race(padded: torch.Tensor, size: int, exp_noise: torch.Tensor) -> torch.Tensor:
    """padded: [B, blocks * size] weights (any positive per-row scale), zero past the vocabulary."""
    rows = padded.shape[0]
    blocked = padded.view(rows, -1, size)
    blocks = blocked.shape[1]
    block = (blocked.sum(-1) / exp_noise[:, :blocks]).argmax(-1)
    inside = blocked[torch.arange(rows), block]
    return block * size + (inside / exp_noise[:, blocks:]).argmax(-1)


def _truncate(scaled: torch.Tensor, top_p: torch.Tensor, top_k: torch.Tensor) -> torch.Tensor:
    """Masks tokens outside each row's top-k / top-p set with -inf. Needs a B x V sort, so it
    only runs when some row asks for truncation."""
    vocab = scaled.shape[-1]
    sorted_logits = scaled.sort(-1, descending=True).values
    probs = sorted_logits.softmax(-1)
    # A token survives top-p while the mass strictly before it is below p: the top token always does.
    inside_p = ((probs.cumsum(-1) - probs) < top_p[:, None]).sum(-1)
    keep = torch.minimum(inside_p, torch.where(top_k > 0, top_k, torch.full_like(top_k, vocab)))
    keep = keep.clamp(min=1)  # a NaN row keeps no token by the count above; index -1 would fail the batch
    threshold = sorted_logits.gather(1, (keep - 1)[:, None])
    return scaled.masked_fill(scaled < threshold, float("-inf"))


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Untempered log p(token) per row: logits [B, V], tokens [B] -> [B]."""
    return logits.gather(-1, tokens[:, None])[:, 0] - logits.logsumexp(-1)


def top_logprobs(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The `k` most likely tokens per row, untempered as token_logprobs: (ids [B, k], logprobs
    [B, k]), most likely first."""
    values, ids = logits.float().topk(k, dim=-1)
    return ids, values - logits.float().logsumexp(-1, keepdim=True)
