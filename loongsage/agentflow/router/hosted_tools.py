"""Tools a provider runs on its own servers (OpenAI's hosted tools, Anthropic's server and
Anthropic-defined tools), which an agent program may send with its own: the router cannot run
them and the engines' model was never taught their schema-less forms.

`router.hosted_tools` decides, one rule for both APIs:
- drop (default): the tool is left out of the prompt, as if never sent; each request's dropped
  tools are recorded on its trajectory (`Trajectory.dropped_tools`, exported with every sample
  and counted per step as agent/hosted_tools_dropped). Codex CLI sends `web_search` (with
  `external_web_access: false`) on its defaults; dropping it leaves the rest of its tools working.
- refuse: a 400 naming the tool (`tools[7].type`), for a run that must see every tool it was sent.
"""

from __future__ import annotations

from loongsage.agentflow.router.errors import bad_request
from loongsage.agentflow.router.validation import join

POLICIES = ("drop", "refuse")  # router.hosted_tools


def hosted_tool(kind: str, path: str, policy: str, dropped: list[str]) -> None:
    """A tool of type `kind` the router cannot run, at `path` (tools[i]): noted in `dropped`, or refused."""
    if policy not in POLICIES:
        raise ValueError(f"router.hosted_tools={policy!r} is not one of {', '.join(POLICIES)}")
    if policy == "refuse":
        raise bad_request(
            f"hosted tool type {kind!r} cannot run here: the router runs no tools of its own and the model only "
            f"calls function tools (router.hosted_tools=refuse; drop leaves such tools out of the prompt)",
            join(path, "type"),
        )
    dropped.append(kind)
