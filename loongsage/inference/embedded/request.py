"""One generation request as the scheduler tracks it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from loongsage.inference.embedded.sampling import SamplingParams


@dataclass
class Sequence:
    rid: str
    prompt_ids: list[int]
    params: SamplingParams
    stop_ids: frozenset[int]
    return_logprob: bool = False
    logprob_start_len: int = -1
    top_logprobs_num: int = 0  # with return_logprob: the k most likely tokens at each position too
    return_routed_experts: bool = False  # R3: the experts each forwarded token was routed to
    on_done: Callable[[Sequence], None] | None = None
    generator: torch.Generator | None = None

    output_ids: list[int] = field(default_factory=list)
    output_logprobs: list[float] = field(default_factory=list)
    input_logprobs: list[float | None] | None = None
    # Per position, (token ids, logprobs) of the top_logprobs_num most likely tokens; None where
    # input_logprobs has None (the first prompt token).
    input_top_logprobs: list[tuple[list[int], list[float]] | None] | None = None
    output_top_logprobs: list[tuple[list[int], list[float]]] = field(default_factory=list)
    # With return_routed_experts: [tokens, layers, top_k] blocks, the prompt's then one per decode step
    routed_experts: list[torch.Tensor] = field(default_factory=list)
    cached_tokens: int = 0
    finish_reason: dict | None = None
    error: str | None = None  # set when the engine failed it: answered as a 500, never as output
    slot: int = -1

    def __post_init__(self):
        if self.params.sampling_seed is not None:
            self.generator = torch.Generator().manual_seed(self.params.sampling_seed)

    @property
    def wants_prompt_logprobs(self) -> bool:
        return self.return_logprob and self.logprob_start_len >= 0

    @property
    def top_k_wanted(self) -> int:
        return self.top_logprobs_num if self.return_logprob else 0

    @property
    def cached_length(self) -> int:
        """Positions whose keys/values are in the KV cache: the newest token is not yet."""
        return len(self.prompt_ids) + len(self.output_ids) - 1

    def finish(self, reason: dict) -> None:
        self.finish_reason = reason
        if self.on_done is not None:
            self.on_done(self)
