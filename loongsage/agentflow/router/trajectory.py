"""Token in, token out: the ids of every turn, kept so that no sampled token is re-tokenized.

A trajectory is what one agent run sends through its own router URL. It holds branches; a
branch holds turns, each turn being one engine call: the prompt ids, the sampled ids with
their logprobs and weight versions, and the assistant message the agent got back.

For a new request the messages are rendered with the chat template, except that every
assistant message the router itself returned is replaced by the exact text the model
sampled (so a template or an agent cannot make it drift). When that text starts with the
text of a branch's last turn (prompt + sampled), the new prompt is that turn's ids plus the
tokens of the remaining text only. Anything else (history rewritten, truncated, edited)
starts a new branch, tokenized afresh, with the reason recorded: the router never guesses
which ids an edited history "meant".

Pure bookkeeping: no HTTP, no engine, no tokenizer (a `tokenize` callable is passed in).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from loongsage.agentflow.router.messages import Message, assistant_key

Tokenize = Callable[[str], list[int]]
SNIPPET_CHARS = 40


@dataclass
class Turn:
    prompt_ids: list[int]
    output_ids: list[int]
    output_logprobs: list[float]
    weight_versions: list[int]  # one per output token
    finish_reason: str  # the engine's: "stop" | "length" | "abort"
    sampled_text: str  # the output ids decoded, special tokens included
    stop_text: str  # the tail of sampled_text that is the stop token the engine ended on ("" if none)
    message: Message  # the assistant message as returned to the agent
    prompt_text: str  # the rendered text that prompt_ids stand for
    inherited: int = 0  # leading prompt ids carried over unchanged from the previous turn
    engine: str = ""
    rids: list[str] = field(default_factory=list)
    engine_seconds: float = 0.0  # time spent waiting on the engine for this turn
    # R3, when the engines return it: int32 [len(prompt_ids) + len(output_ids) - 1, layers * top_k]
    # (inference.resumable.Generation.routed_experts)
    routed_experts: np.ndarray | None = None
    thinking: str = ""  # the reply's thinking, returned to the agent apart from message.content

    @property
    def tip_ids(self) -> list[int]:
        return self.prompt_ids + self.output_ids

    @property
    def tip_text(self) -> str:
        return self.prompt_text + self.sampled_text

    @property
    def reply_text(self) -> str:
        """What the template must show as this turn's assistant message for the next prompt to
        extend it: the sampled text without its stop token (the template writes its own)."""
        return self.sampled_text[: len(self.sampled_text) - len(self.stop_text)]


@dataclass
class Branch:
    index: int
    attempt: str
    reason: str  # why it began
    turns: list[Turn] = field(default_factory=list)


def echoed_with_additions(sampled: tuple, echoed: tuple) -> bool:
    """Whether assistant key `echoed` is `sampled` with arguments added to its calls (none changed
    or removed): the same content and the same calls in order, each sampled argument kept."""
    (content, calls), (echoed_content, echoed_calls) = sampled, echoed
    if content != echoed_content or len(calls) != len(echoed_calls):
        return False
    for (name, arguments), (echoed_name, echoed_arguments) in zip(calls, echoed_calls):
        if name != echoed_name:
            return False
        given, sent = json.loads(arguments), json.loads(echoed_arguments)
        if not (isinstance(given, dict) and isinstance(sent, dict) and all(k in sent and sent[k] == v for k, v in given.items())):
            return False
    return True


@dataclass(frozen=True)
class PromptPlan:
    prompt_ids: list[int]
    prompt_text: str
    branch: Branch | None  # the branch this prompt extends; None starts a new one
    base_turns: int  # how many turns `branch` had when planned
    inherited: int
    reason: str  # why a new branch, "" when extending


class Trajectory:
    def __init__(self, trajectory_id: str):
        self.id = trajectory_id
        self.branches: list[Branch] = []
        self._sampled_replies: dict[tuple, list[str]] = {}
        # Hosted tools its requests sent and the router left out, by type (router.hosted_tools=drop).
        self.dropped_tools: Counter[str] = Counter()
        # What it has spent of its budget (router.max_*_per_trajectory), and requests refused past it.
        self.turns_generated = 0
        self.tokens_generated = 0
        self.budget_refusals = 0

    def substitute_replies(self, messages: list[Message]) -> list[Message]:
        """Each assistant message this trajectory returned, replaced by the text the model sampled.
        Replies that look alike (same content and calls, different sampled whitespace or special
        tokens) are taken in the order they were returned, as a linear conversation repeats them.
        A program may echo a call back with arguments of its own added (Claude Code fills in its
        schema's defaults: `replace_all: false`): that is still the reply it was given."""
        substituted = []
        seen: dict[tuple, int] = {}
        for message in messages:
            if message.role == "assistant":
                key = assistant_key(message.content, message.tool_calls)
                if key not in self._sampled_replies:
                    key = next((k for k in self._sampled_replies if echoed_with_additions(k, key)), key)
                replies = self._sampled_replies.get(key)
                if replies:
                    occurrence = seen[key] = seen.get(key, -1) + 1
                    message = Message("assistant", replies[min(occurrence, len(replies) - 1)])
            substituted.append(message)
        return substituted

    def plan(self, rendered: str, attempt: str, tokenize: Tokenize) -> PromptPlan:
        """The prompt ids for `rendered` (the substituted messages rendered by the chat format)."""
        branch = self._longest_extended_branch(rendered, attempt)
        if branch is None:
            return PromptPlan(tokenize(rendered), rendered, None, 0, 0, self._why_new_branch(rendered, attempt))
        tip = branch.turns[-1]
        remainder = rendered[len(tip.tip_text) :]
        ids = tip.tip_ids + (tokenize(remainder) if remainder else [])
        return PromptPlan(ids, rendered, branch, len(branch.turns), len(tip.tip_ids), "")

    def record(self, plan: PromptPlan, attempt: str, turn: Turn) -> Branch:
        branch = plan.branch
        if branch is not None and len(branch.turns) != plan.base_turns:
            # Another request on this trajectory extended the branch while this one generated.
            branch = self._new_branch(attempt, f"a concurrent request extended branch {branch.index} first")
        elif branch is None:
            branch = self._new_branch(attempt, plan.reason)
        turn.inherited = plan.inherited if branch is plan.branch else 0
        branch.turns.append(turn)
        self.turns_generated += 1
        self.tokens_generated += len(turn.output_ids)
        key = assistant_key(turn.message.content, turn.message.tool_calls)
        self._sampled_replies.setdefault(key, []).append(turn.reply_text)
        return branch

    def attempts(self) -> list[str]:
        return list(dict.fromkeys(b.attempt for b in self.branches))

    def _new_branch(self, attempt: str, reason: str) -> Branch:
        branch = Branch(len(self.branches), attempt, reason)
        self.branches.append(branch)
        return branch

    def _longest_extended_branch(self, rendered: str, attempt: str) -> Branch | None:
        best, best_length = None, -1
        for branch in self.branches:
            if branch.attempt != attempt or not branch.turns:
                continue
            tip_text = branch.turns[-1].tip_text
            if len(tip_text) > best_length and rendered.startswith(tip_text):
                best, best_length = branch, len(tip_text)
        return best

    def _why_new_branch(self, rendered: str, attempt: str) -> str:
        latest = next((b for b in reversed(self.branches) if b.attempt == attempt and b.turns), None)
        if latest is None:
            return f"first request of attempt {attempt}"
        tip_text = latest.turns[-1].tip_text
        at = _common_prefix_length(rendered, tip_text)
        return (
            f"history does not extend branch {latest.index} (rewritten, truncated or edited): "
            f"differs at character {at}, expected {tip_text[at : at + SNIPPET_CHARS]!r}, "
            f"got {rendered[at : at + SNIPPET_CHARS]!r}"
        )


def _common_prefix_length(a: str, b: str) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n
