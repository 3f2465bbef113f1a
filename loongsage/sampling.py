"""The run's one sampling block, as the router applies it to agent requests.

Its own module (no imports) so that the router and the config rules can both use it without
either importing the other. The controller builds it from `rollout.*`; the defaults equal
RolloutConfig's, so a router built without it samples as a plain run would.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_MAX_NEW_TOKENS = 128  # rollout.max_new_tokens, and what a request that sets none gets


@dataclass(frozen=True)
class SamplingDefaults:
    """What a chat request gets for each of these it does not set itself; a value it sets is kept."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1  # -1: off
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS  # a request's max_tokens (OpenAI: or max_completion_tokens)
