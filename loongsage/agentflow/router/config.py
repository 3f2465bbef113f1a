"""Router settings."""

from __future__ import annotations

from dataclasses import dataclass, field

from loongsage.agentflow.router.hosted_tools import POLICIES
from loongsage.sampling import SamplingDefaults

DEFAULT_MAX_BODY_BYTES = 16 * 2**20


@dataclass(frozen=True)
class RouterConfig:
    model: str  # registry name or HF directory: its tokenizer and chat template are used
    engine_urls: tuple[str, ...]  # SGLang-protocol engines serving that model
    served_model_names: tuple[str, ...] = ()  # what requests may name as `model`; default (model,)
    # More names that reach the served model (router.model_aliases): a program that picks a model
    # by name for side calls (a small, fast one) gets the served model under the name it asked for.
    model_aliases: tuple[str, ...] = ()
    # What becomes of hosted tools a request sends (web_search, ...): drop | refuse (hosted_tools.py).
    hosted_tools: str = "drop"
    api_key: str | None = None  # None: a fresh key per run (secrets.token_urlsafe)
    host: str = "127.0.0.1"  # agents run on this machine; expose wider only on purpose
    port: int = 0  # 0: any free port
    chat_format: str = "hermes"  # registry name or "package.module:Class"
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_context: int | None = None  # prompt + output tokens; None: asked of the engine
    request_timeout_s: float = 600.0
    max_resumes: int = 8  # an aborted generation (weight update) is continued this many times at most
    # Per trajectory, over all its requests (router.max_turns_per_trajectory, ...); 0: no bound.
    max_turns_per_trajectory: int = 0
    max_tokens_per_trajectory: int = 0
    # The run's rollout.temperature/top_p/top_k/max_new_tokens: what a request that leaves one of
    # them unset is sampled with, so black-box agents sample as the run says too.
    sampling: SamplingDefaults = field(default_factory=SamplingDefaults)
    # Ask the engines for the experts each token was routed to (R3; an MoE policy's engines started
    # with --enable-return-routed-experts), kept with each turn.
    return_routed_experts: bool = False

    def __post_init__(self):
        if isinstance(self.engine_urls, str):
            raise ValueError("router engine_urls must be a list of URLs, not one string")
        if self.max_body_bytes <= 0:
            raise ValueError(f"router max_body_bytes={self.max_body_bytes} must be > 0")
        if self.hosted_tools not in POLICIES:
            raise ValueError(f"router hosted_tools={self.hosted_tools!r} is not one of {', '.join(POLICIES)}")
        if self.max_resumes < 0:
            raise ValueError(f"router max_resumes={self.max_resumes} must be >= 0")
        for name in ("max_turns_per_trajectory", "max_tokens_per_trajectory"):
            if getattr(self, name) < 0:
                raise ValueError(f"router.{name}={getattr(self, name)} must be >= 0 (0: no bound)")

    @property
    def model_names(self) -> tuple[str, ...]:
        """Every name a request may ask for: the served names, then the aliases."""
        return (*(tuple(self.served_model_names) or (self.model,)), *self.model_aliases)
