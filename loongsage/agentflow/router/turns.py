"""An engine's answer turned into a recorded turn and the assistant message the agent gets."""

from __future__ import annotations

from collections.abc import Callable

from loongsage.agentflow.router.chat_format import split_thinking
from loongsage.agentflow.router.messages import Message, ToolCall
from loongsage.agentflow.router.trajectory import PromptPlan, Turn
from loongsage.inference.resumable import Generation

Decode = Callable[..., str]  # decode(ids, skip_special_tokens=False) -> text
Parse = Callable[[str], "tuple[str, list[ToolCall]]"]


def make_turn(
    plan: PromptPlan, generation: Generation, decode: Decode, parse: Parse | None, engine_url: str = ""
) -> tuple[Turn, str | None]:
    """The turn to record and, if generation ended on a stop string, that string.

    The agent sees the text without special tokens and without the stop token or stop string
    (OpenAI semantics) and its thinking apart (chat_format.split_thinking); the turn keeps the
    sampled text whole, so the next prompt can be matched against it. `parse` (the chat
    format's) splits out tool calls; None leaves text."""
    output, finish = generation.output_ids, generation.finish
    matched = finish.get("matched")
    ends_on_stop_token = finish.get("type") == "stop" and isinstance(matched, int) and output[-1:] == [matched]
    body = output[:-1] if ends_on_stop_token else output
    stop_text = decode(output[-1:]) if ends_on_stop_token else ""
    visible = decode(body, skip_special_tokens=True)
    matched_stop = matched if finish.get("type") == "stop" and isinstance(matched, str) else None
    if matched_stop is not None and matched_stop in visible:
        visible = visible[: visible.index(matched_stop)]
    thinking, visible = split_thinking(visible)
    content, calls = parse(visible) if parse is not None else (visible, [])
    turn = Turn(
        prompt_ids=plan.prompt_ids,
        output_ids=output,
        output_logprobs=generation.logprobs,
        weight_versions=generation.versions,
        finish_reason=finish.get("type", "stop"),
        sampled_text=decode(body) + stop_text,
        stop_text=stop_text,
        message=Message("assistant", content, tuple(calls)),
        prompt_text=plan.prompt_text,
        engine=engine_url,
        rids=generation.rids,
        engine_seconds=generation.seconds,
        routed_experts=generation.routed_experts,
        thinking=thinking,
    )
    return turn, matched_stop
