"""Slot-based KV cache for continuous batching, and the prompt (prefix) cache.

Running sequences always occupy slots 0..n-1 so a decode step can slice `[:n]` instead of
gathering rows; `move` fills a freed slot with the last one.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import torch


class KVCache:
    def __init__(
        self, num_layers: int, slots: int, kv_heads: int, head_dim: int, max_context: int, dtype: torch.dtype, chunk: int = 256
    ):
        self.shape = (num_layers, slots, kv_heads, 0, head_dim)
        self.max_context, self.dtype, self.chunk = max_context, dtype, chunk
        self.keys = torch.zeros(self.shape, dtype=dtype)
        self.values = torch.zeros(self.shape, dtype=dtype)

    @property
    def capacity(self) -> int:
        return self.keys.shape[3]

    def ensure(self, length: int) -> None:
        """Grow the position axis in chunks (memory is proportional to the longest live sequence,
        not to max_context) so that `length` positions fit."""
        if length <= self.capacity:
            return
        new_cap = min(self.max_context, -(-length // self.chunk) * self.chunk)
        if length > new_cap:
            raise ValueError(f"sequence of {length} tokens exceeds max_context={self.max_context}")
        shape = (*self.shape[:3], new_cap, self.shape[4])
        for name in ("keys", "values"):
            old = getattr(self, name)
            new = torch.zeros(shape, dtype=self.dtype)
            new[:, :, :, : old.shape[3]] = old
            setattr(self, name, new)

    def release(self) -> None:
        """Back to no positions, as when created; `ensure` grows it again when sequences need it.
        Only while no sequence occupies a slot."""
        self.keys = torch.zeros(self.shape, dtype=self.dtype)
        self.values = torch.zeros(self.shape, dtype=self.dtype)

    def write(self, slot: int, keys: torch.Tensor, values: torch.Tensor) -> None:
        """keys/values: [layers, kv_heads, T, head_dim] for positions 0..T-1."""
        t = keys.shape[2]
        self.ensure(t)
        self.keys[:, slot, :, :t] = keys
        self.values[:, slot, :, :t] = values

    def move(self, src: int, dst: int, length: int) -> None:
        self.keys[:, dst, :, :length] = self.keys[:, src, :, :length]
        self.values[:, dst, :, :length] = self.values[:, src, :, :length]


@dataclass
class PrefillResult:
    """What a prompt's prefill produced; enough to start decoding without running it again."""

    keys: torch.Tensor  # [layers, kv_heads, T, head_dim]
    values: torch.Tensor
    last_logits: torch.Tensor  # [vocab] fp32, predicts the first output token
    # logprob of prompt token i (i >= 1) given tokens < i; None until some request asked for it
    prompt_logprobs: list[float] | None = None
    # (ids, logprobs) [T - 1, k] of the k most likely tokens at each of those positions
    prompt_top: tuple[torch.Tensor, torch.Tensor] | None = None
    # An MoE model's chosen experts per prompt token [T, layers, top_k] (int32); None for a dense one
    experts: torch.Tensor | None = None

    def holds_prompt_logprobs(self, top_k: int) -> bool:
        return self.prompt_logprobs is not None and (
            top_k == 0 or (self.prompt_top is not None and self.prompt_top[0].shape[-1] >= top_k)
        )


class PromptCache:
    """Small LRU keyed by the prompt's token tuple: GRPO sends the same prompt n times."""

    def __init__(self, max_entries: int = 16):
        self.max_entries = max_entries
        self._entries: OrderedDict[tuple[int, ...], PrefillResult] = OrderedDict()

    def get(self, prompt: tuple[int, ...]) -> PrefillResult | None:
        entry = self._entries.get(prompt)
        if entry is not None:
            self._entries.move_to_end(prompt)
        return entry

    def put(self, prompt: tuple[int, ...], entry: PrefillResult) -> None:
        if self.max_entries <= 0:
            return
        self._entries[prompt] = entry
        self._entries.move_to_end(prompt)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def longest_prefix(self, prompt: tuple[int, ...], min_length: int) -> tuple[PrefillResult | None, int]:
        """The cached prefill sharing the most leading tokens with `prompt`, and how many it shares
        (at most len(prompt) - 1: the last token must run to give the next-token logits);
        (None, 0) when none shares `min_length`."""
        best, best_length = None, 0
        for key, entry in self._entries.items():
            length = min(_common_prefix_length(key, prompt), len(prompt) - 1)
            if length >= max(min_length, best_length + 1):
                best, best_length = entry, length
        return best, best_length

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


def _common_prefix_length(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    length = min(len(a), len(b))
    if a[:length] == b[:length]:  # the common case, compared in C
        return length
    for i in range(length):
        if a[i] != b[i]:
            return i
    return length
