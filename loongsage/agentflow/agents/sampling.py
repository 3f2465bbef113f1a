"""A white-box agent's sampling overrides as arguments of `chat.completions.create`.

An agent carries no sampling defaults of its own: what it leaves unset is not sent, and the
router samples it with the run's rollout.* block (RouterConfig.sampling), as it does for
black-box agents. A value set in the agent's options is sent, and the router keeps it.
"""

from __future__ import annotations

from typing import Any


def request_sampling(
    max_tokens: int | None = None, temperature: float | None = None, top_p: float | None = None, top_k: int | None = None
) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        name: value
        for name, value in (("max_tokens", max_tokens), ("temperature", temperature), ("top_p", top_p))
        if value is not None
    }
    if top_k is not None:  # not an OpenAI parameter: the vLLM/SGLang extension, in the body as is
        kwargs["extra_body"] = {"top_k": top_k}
    return kwargs
