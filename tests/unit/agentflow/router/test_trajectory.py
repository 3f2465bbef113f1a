"""Token in, token out without HTTP: an agent loop simulated on a Trajectory with the real
tokenizer and chat template, the engine's answers given as ids."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from loongsage.agentflow.router.chat_format import HermesFormat
from loongsage.agentflow.router.messages import Message, ToolCall
from loongsage.agentflow.router.trajectory import Trajectory
from loongsage.agentflow.router.turns import Generation, make_turn

EOS = 2  # <|im_end|>
HAVING_IN_ODD_PIECES = [56, 12052, 4728]  # "H" + "AV" + "ING"; the text re-tokenizes as "HA" + "V" + "ING"


class Loop:
    """What the router does per request, minus HTTP and the engine."""

    def __init__(self, tokenizer, attempt: str = "0"):
        self.tokenizer = tokenizer
        self.format = HermesFormat(tokenizer)
        self.trajectory = Trajectory("t")
        self.attempt = attempt

    def tokenize(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def decode(self, ids, skip_special_tokens=False) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens, clean_up_tokenization_spaces=False)

    def plan(self, messages: list[Message], tools=()):
        rendered = self.format.render(self.trajectory.substitute_replies(messages), list(tools))
        return self.trajectory.plan(rendered, self.attempt, self.tokenize)

    def turn(self, messages: list[Message], output_ids: list[int], tools=(), version: int = 3, plan=None):
        plan = plan or self.plan(messages, tools)
        finish = {"type": "stop", "matched": EOS} if output_ids[-1:] == [EOS] else {"type": "length"}
        generation = Generation(list(output_ids), [-0.5] * len(output_ids), [version] * len(output_ids), finish)
        turn, _ = make_turn(plan, generation, self.decode, self.format.parse_assistant if tools else None)
        branch = self.trajectory.record(plan, self.attempt, turn)
        return turn, branch


def _ids(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)


def test_next_prompt_is_previous_ids_plus_only_the_new_messages(tokenizer):
    loop = Loop(tokenizer)
    history = [Message("user", "Hi")]
    first, branch = loop.turn(history, _ids(tokenizer, "Hello there!") + [EOS])
    assert first.prompt_ids == _ids(tokenizer, loop.format.render(history, []))
    history += [first.message, Message("user", "Again")]
    second, same = loop.turn(history, _ids(tokenizer, "Sure.") + [EOS])
    assert same is branch and len(branch.turns) == 2
    assert second.prompt_ids[: len(first.tip_ids)] == first.tip_ids
    assert second.inherited == len(first.tip_ids)
    # The template's "\n" after the sampled <|im_end|> is the first new token.
    assert tokenizer.decode(second.prompt_ids[len(first.tip_ids) :]) == (
        "\n<|im_start|>user\nAgain<|im_end|>\n<|im_start|>assistant\n"
    )


def test_a_word_sampled_as_odd_pieces_survives_intact(tokenizer):
    assert _ids(tokenizer, "HAVING") != HAVING_IN_ODD_PIECES
    assert tokenizer.decode(HAVING_IN_ODD_PIECES) == "HAVING"
    loop = Loop(tokenizer)
    history = [Message("user", "Shout a word")]
    first, _ = loop.turn(history, HAVING_IN_ODD_PIECES + [EOS])
    assert first.message.content == "HAVING"
    second, _ = loop.turn(history + [Message("assistant", "HAVING"), Message("user", "More")], [42, EOS])
    start = len(first.prompt_ids)
    assert second.prompt_ids[start : start + 4] == HAVING_IN_ODD_PIECES + [EOS]


def test_echoed_replies_are_recognised_despite_whitespace_ids_and_json_spacing(tokenizer):
    loop = Loop(tokenizer)
    tools = [{"name": "f", "parameters": {"type": "object"}}]
    sampled = _ids(tokenizer, ' Calling.\n<tool_call>\n{"name": "f", "arguments": {"a": 1, "b": [2]}}\n</tool_call>')
    first, _ = loop.turn([Message("user", "go")], sampled + [EOS], tools)
    (call,) = first.message.tool_calls
    assert first.message.content == "Calling."
    echoed = Message("assistant", "Calling.  ", (ToolCall("my-own-id", "f", '{"b":[2],   "a":1}'),))
    second, branch = loop.turn([Message("user", "go"), echoed, Message("tool", "ok", tool_call_id=call.id)], [7, EOS], tools)
    assert len(loop.trajectory.branches) == 1 and len(branch.turns) == 2
    assert second.prompt_ids[: len(first.tip_ids)] == first.tip_ids
    assert "<tool_response>\nok\n</tool_response>" in tokenizer.decode(second.prompt_ids[len(first.tip_ids) :])


def test_a_call_echoed_with_arguments_added_is_still_the_reply_but_one_changed_is_not(tokenizer):
    """Claude Code echoes its Edit calls back with its schema's default filled in (replace_all)."""
    tools = [{"name": "Edit", "parameters": {"type": "object"}}]
    sampled = _ids(tokenizer, '<tool_call>\n{"name": "Edit", "arguments": {"old": "a", "new": "b"}}\n</tool_call>')
    for echoed_arguments, branches in (('{"replace_all": false, "new": "b", "old": "a"}', 1), ('{"old": "a", "new": "c"}', 2)):
        loop = Loop(tokenizer)
        first, _ = loop.turn([Message("user", "go")], sampled + [EOS], tools)
        (call,) = first.message.tool_calls
        echoed = Message("assistant", "", (ToolCall(call.id, "Edit", echoed_arguments),))
        loop.turn([Message("user", "go"), echoed, Message("tool", "ok", tool_call_id=call.id)], [7, EOS], tools)
        assert len(loop.trajectory.branches) == branches, echoed_arguments


def test_a_rewritten_history_starts_a_new_branch_and_says_why(tokenizer):
    loop = Loop(tokenizer)
    first, _ = loop.turn([Message("user", "Hi")], _ids(tokenizer, "Hello") + [EOS])
    edited = [Message("user", "Hi"), Message("assistant", "Hello, edited"), Message("user", "?")]
    second, branch = loop.turn(edited, [9, EOS])
    assert branch.index == 1 and len(loop.trajectory.branches) == 2
    assert "does not extend branch 0" in branch.reason and "character" in branch.reason
    assert second.prompt_ids == _ids(tokenizer, second.prompt_text) and second.inherited == 0
    # The original branch can still be continued.
    third, back = loop.turn([Message("user", "Hi"), first.message, Message("user", "x")], [5, EOS])
    assert back.index == 0 and third.prompt_ids[: len(first.tip_ids)] == first.tip_ids


def test_a_truncated_history_starts_a_new_branch(tokenizer):
    loop = Loop(tokenizer)
    history = [Message("system", "S"), Message("user", "a")]
    first, _ = loop.turn(history, [11, EOS])
    history += [first.message, Message("user", "b")]
    second, _ = loop.turn(history, [12, EOS])
    _, branch = loop.turn([Message("system", "S"), Message("user", "b")], [13, EOS])
    assert branch.index == 1


def test_a_reply_cut_by_length_continues_the_branch(tokenizer):
    loop = Loop(tokenizer)
    first, _ = loop.turn([Message("user", "Hi")], _ids(tokenizer, "Once upon"))  # no EOS: max_tokens hit
    assert first.finish_reason == "length" and first.stop_text == ""
    second, branch = loop.turn([Message("user", "Hi"), first.message, Message("user", "go on")], [3, EOS])
    assert len(branch.turns) == 2
    # The template's <|im_end|> is not sampled, so it is a prompt token of the next turn.
    assert second.prompt_ids[len(first.tip_ids)] == EOS


def test_concurrent_requests_from_one_tip_fork(tokenizer):
    loop = Loop(tokenizer)
    first, _ = loop.turn([Message("user", "Hi")], [20, EOS])
    history = [Message("user", "Hi"), first.message, Message("user", "Next")]
    plan_a, plan_b = loop.plan(history), loop.plan(history)
    _, branch_a = loop.turn(history, [21, EOS], plan=plan_a)
    turn_b, branch_b = loop.turn(history, [22, EOS], plan=plan_b)
    assert branch_a.index == 0 and branch_b.index == 1
    assert "concurrent" in branch_b.reason
    assert turn_b.prompt_ids == plan_b.prompt_ids  # its ids still extend the earlier turn


def test_attempts_never_share_branches(tokenizer):
    loop = Loop(tokenizer)
    loop.turn([Message("user", "Hi")], [20, EOS])
    loop.attempt = "1"
    _, branch = loop.turn([Message("user", "Hi")], [20, EOS])
    assert branch.index == 1 and branch.attempt == "1" and branch.reason == "first request of attempt 1"
    assert loop.trajectory.attempts() == ["0", "1"]


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 49151), min_size=1, max_size=12), min_size=2, max_size=5),
    st.lists(st.booleans(), min_size=5, max_size=5),
)
def test_no_sampled_id_is_ever_changed_across_turns(tokenizer, outputs, ends_with_eos):
    """Random ids (special tokens, split UTF-8 bytes, odd merges) as the engine's outputs; the
    agent echoes each reply back as received: every sampled id stays where it was sampled."""
    loop = Loop(tokenizer)
    history = [Message("user", "start")]
    turns = []
    for i, output in enumerate(outputs):
        output = output + ([EOS] if ends_with_eos[i] else [])
        turn, branch = loop.turn(history, output)
        turns.append(turn)
        history += [turn.message, Message("user", f"next {i}")]
    assert len(loop.trajectory.branches) == 1
    final = turns[-1].tip_ids
    for turn in turns:
        start = len(turn.prompt_ids)
        assert final[:start] == turn.prompt_ids
        assert final[start : start + len(turn.output_ids)] == turn.output_ids
