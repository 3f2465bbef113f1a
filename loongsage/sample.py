"""The unit of data that flows from rollout to training."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np


@dataclass
class Sample:
    """One prompt and one sampled response, with everything training needs to score it.

    Per-token lists (`response_logprobs`, `loss_mask`, `weight_versions`, a teacher's or the
    critic's `token_advantages`, the critic's `values` and `returns`, `teacher_top_ids`,
    `teacher_top_logprobs`) run over `response_ids`.
    In the trainer the sequence is `prompt_ids + response_ids`, and the logprob of response
    token j is predicted from the position just before it.
    """

    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    response_logprobs: list[float] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    weight_versions: list[int] = field(default_factory=list)
    reward: float = 0.0
    advantage: float = 0.0
    # On-policy distillation (loongsage.teachers), empty without a teacher. PG style: added to
    # `advantage` token by token. GKD style: the teacher's top-k ids and log-probs at each token.
    token_advantages: list[float] = field(default_factory=list)
    # With a critic (algorithm.advantage=gae): its value of each response token at rollout, and the
    # return each is trained toward (0 on tokens the loss does not train); empty without one.
    values: list[float] = field(default_factory=list)
    returns: list[float] = field(default_factory=list)
    teacher_top_ids: list[list[int]] = field(default_factory=list)
    teacher_top_logprobs: list[list[float]] = field(default_factory=list)
    # An MoE policy's routing as the engine ran it (R3): int32 [num_tokens - 1, layers * top_k], row i
    # the experts position i of prompt_ids + response_ids went to (the last token was never forwarded).
    routed_experts: np.ndarray | None = None
    group_id: int = 0
    # The share of its episode's trained tokens this sample holds: 1.0 for a sample that is a
    # whole episode; an agent episode exported as several branches (samples) splits it among
    # them, so that the sequence-level loss aggregations count an episode once, not per branch.
    episode_share: float = 1.0
    finish_reason: str = ""
    prompt_text: str = ""
    response_text: str = ""
    label: str = ""
    metadata: dict = field(default_factory=dict)

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.response_ids)
