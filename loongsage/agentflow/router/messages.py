"""The router's own view of a chat request, shared by the OpenAI and Anthropic front ends.

Both wire formats are validated and converted into these types; the chat format, the
token-in/token-out bookkeeping and the engine call only ever see them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from loongsage.json_input import JsonInputError, parse_json

ROLES = ("system", "user", "assistant", "tool")


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text, as OpenAI carries it

    def arguments_object(self):
        """The arguments parsed; the raw text when it is not JSON (an agent may send anything,
        including JSON too deep or with numbers too long to parse safely)."""
        try:
            return parse_json(self.arguments)
        except (JsonInputError, TypeError):
            return self.arguments


@dataclass(frozen=True)
class Message:
    role: str
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None


@dataclass(frozen=True)
class Sampling:
    """What the request asks of the sampler. None: the run's value (RouterConfig.sampling) for
    max_tokens, temperature, top_p and top_k; the engine's default for the rest."""

    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    stop: tuple[str, ...] = ()
    seed: int | None = None
    ignore_eos: bool | None = None  # vLLM/SGLang extension: generate max_tokens whatever is sampled


@dataclass
class ChatRequest:
    messages: list[Message]  # empty for a legacy completion (prompt_text)
    tools: list[dict] = field(default_factory=list)  # OpenAI function specs: {name, description, parameters}
    parse_tool_calls: bool = True  # False for tool_choice "none": tools stay unrendered, text stays text
    sampling: Sampling = field(default_factory=Sampling)
    stream: bool = False
    include_usage: bool = False  # a final usage chunk when streaming
    logprobs: bool = False  # return each sampled token's logprob to the agent
    top_logprobs: int = 0  # with logprobs: the k most likely tokens at each position too
    n: int = 1  # sampled replies to this one prompt (Router.complete_choices)
    prompt_text: str | None = None  # a legacy completion's prompt: the text itself, no chat template
    dropped_tools: tuple[str, ...] = ()  # the types of the hosted tools left out (router.hosted_tools=drop)
    thinking: bool | None = None  # the model's thinking on or off where it has a switch; None: its default


@dataclass(frozen=True)
class TokenLogprob:
    token: str  # the token's text
    logprob: float
    top: tuple[tuple[str, float], ...] = ()  # (text, logprob) of the most likely tokens here, most likely first


@dataclass
class TurnResult:
    """One assistant reply, ready for either front end to format."""

    content: str
    tool_calls: list[ToolCall]
    finish_reason: str  # "stop" | "length" | "tool_calls"
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    token_logprobs: list[TokenLogprob]  # one per sampled token, when asked for
    stop_sequence: str | None  # the stop string generation ended on
    branch: int  # where the turn was recorded on its trajectory
    turn: int
    thinking: str = ""  # the reply's thinking text (chat_format.split_thinking), apart from content


def canonical_json(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def assistant_key(content: str, tool_calls) -> tuple:
    """Identity of an assistant message up to what agents commonly change when they echo it back:
    surrounding whitespace, `null` vs "" content, tool-call ids, and the spacing or key order of
    the arguments JSON."""
    calls = tuple((call.name, canonical_json(call.arguments_object())) for call in tool_calls)
    return ((content or "").strip(), calls)
