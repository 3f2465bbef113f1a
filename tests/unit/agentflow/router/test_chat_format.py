"""Chat format: rendering with the tokenizer's template (+ Hermes tool markup) and parsing of
generated text into content and tool calls."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loongsage.agentflow.router.chat_format import HermesFormat, assistant_text, get_chat_format, split_thinking
from loongsage.agentflow.router.errors import RouterError
from loongsage.agentflow.router.messages import Message, ToolCall
from loongsage.models import load_tokenizer

WEATHER = {
    "name": "get_weather",
    "description": "Current weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
# A cut-down Qwen2.5-style template that reads `tools` itself.
NATIVE_TEMPLATE = (
    "{% if tools %}<|im_start|>system\nTOOLS:{% for t in tools %}{{ t | tojson }}{% endfor %}<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
    "{% for c in m.tool_calls or [] %}CALL {{ c.function.name }} {{ c.function.arguments | tojson }}{% endfor %}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture(scope="module")
def hermes(tokenizer):
    return HermesFormat(tokenizer)


def test_plain_chat_renders_exactly_as_the_template(hermes, tokenizer):
    chat = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "Again"},
    ]
    rendered = hermes.render([Message(m["role"], m["content"]) for m in chat], [])
    assert rendered == tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    assert rendered.endswith("<|im_start|>assistant\n")


def test_tools_calls_and_results_in_hermes_markup_when_the_template_has_no_tools(hermes):
    assert not hermes.native_tools  # SmolLM2's ChatML knows no tools
    call = ToolCall("call_1", "get_weather", '{"city":  "Paris"}')
    messages = [
        Message("system", "Be brief."),
        Message("user", "Weather in Paris?"),
        Message("assistant", "Checking.", (call,)),
        Message("tool", "sunny", tool_call_id="call_1"),
        Message("tool", "22C", tool_call_id="call_1"),
        Message("user", "Thanks"),
    ]
    rendered = hermes.render(messages, [WEATHER])
    system = rendered.split("<|im_end|>")[0]
    assert system.startswith("<|im_start|>system\nBe brief.\n\n# Tools")
    assert "<tools>\n" + json.dumps({"type": "function", "function": WEATHER}) + "\n</tools>" in system
    assert (
        '<|im_start|>assistant\nChecking.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}'
        "\n</tool_call><|im_end|>"
    ) in rendered
    # Two results of one round share one user turn; the next user message has its own.
    assert (
        "<|im_start|>user\n<tool_response>\nsunny\n</tool_response>\n<tool_response>\n22C\n"
        "</tool_response><|im_end|>\n<|im_start|>user\nThanks<|im_end|>"
    ) in rendered


def test_tools_without_a_system_message_get_one(hermes):
    rendered = hermes.render([Message("user", "Hi")], [WEATHER])
    assert rendered.startswith("<|im_start|>system\n# Tools")
    assert rendered.count("<|im_start|>system") == 1


def test_a_template_that_reads_tools_gets_them_natively(tiny_model_path):
    tokenizer = load_tokenizer(tiny_model_path)
    tokenizer.chat_template = NATIVE_TEMPLATE
    native = HermesFormat(tokenizer)
    assert native.native_tools
    call = ToolCall("c", "get_weather", '{"city": "Rome"}')
    messages = [Message("user", "Hi"), Message("assistant", "", (call,)), Message("tool", "rainy", tool_call_id="c")]
    rendered = native.render(messages, [WEATHER])
    assert rendered.startswith("<|im_start|>system\nTOOLS:" + json.dumps(WEATHER))
    assert 'CALL get_weather {"city": "Rome"}' in rendered  # arguments passed as an object
    assert "<|im_start|>tool\nrainy<|im_end|>" in rendered and "<tool_response>" not in rendered


def test_a_template_error_is_a_400_naming_messages(tiny_model_path):
    tokenizer = load_tokenizer(tiny_model_path)
    tokenizer.chat_template = "{{ raise_exception('roles must alternate') }}"
    with pytest.raises(RouterError, match="roles must alternate") as caught:
        HermesFormat(tokenizer).render([Message("user", "Hi")], [])
    assert (caught.value.status, caught.value.param) == (400, "messages")


def test_parse_plain_text_is_left_unchanged(hermes):
    assert hermes.parse_assistant("  Just text.\n") == ("  Just text.\n", [])


def test_parse_tool_calls_between_content(hermes):
    text = (
        'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
        '<tool_call>{"name": "get_time", "parameters": {"tz": "CET"}}</tool_call>'
    )
    content, calls = hermes.parse_assistant(text)
    assert content == "Let me check."
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("get_weather", {"city": "Paris"}), ("get_time", {"tz": "CET"})]
    assert len({c.id for c in calls}) == 2 and all(c.id.startswith("call_") for c in calls)


def test_parse_arguments_given_as_a_json_string(hermes):
    _, calls = hermes.parse_assistant('<tool_call>{"name": "f", "arguments": "{\\"x\\": 1}"}</tool_call>')
    assert json.loads(calls[0].arguments) == {"x": 1}


@pytest.mark.parametrize(
    "block",
    [
        "<tool_call>{not json}</tool_call>",
        '<tool_call>{"arguments": {}}</tool_call>',
        '<tool_call>{"name": "", "arguments": {}}</tool_call>',
        '<tool_call>{"name": "f", "arguments": [1, 2]}</tool_call>',
        '<tool_call>{"name": "f", "arguments": "not json"}</tool_call>',
        '<tool_call>["f"]</tool_call>',
        '<tool_call>{"name": "f", "arguments": {}}',  # never closed
    ],
)
def test_malformed_tool_calls_stay_content(hermes, block):
    text = "Before " + block
    assert hermes.parse_assistant(text) == (text, [])


def test_a_malformed_block_stays_while_a_good_one_parses(hermes):
    content, calls = hermes.parse_assistant('<tool_call>{bad}</tool_call>\n<tool_call>{"name": "f"}</tool_call>')
    assert content == "<tool_call>{bad}</tool_call>"
    assert [(c.name, c.arguments) for c in calls] == [("f", "{}")]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                "<tool_call>",
                "</tool_call>",
                "{",
                "}",
                '"name"',
                ":",
                '"f"',
                ",",
                '"arguments"',
                "[",
                "]",
                "x",
                "\n",
                " ",
                "null",
                "\ufffd",
            ]
        ),
        max_size=30,
    )
)
def test_parse_never_raises(hermes, pieces):
    content, calls = hermes.parse_assistant("".join(pieces))
    assert isinstance(content, str)
    assert all(isinstance(json.loads(c.arguments), dict) for c in calls)


def test_rendered_tool_calls_parse_back(hermes):
    calls = (ToolCall("a", "get_weather", '{"city": "Oslo"}'), ToolCall("b", "noop", "{}"))
    content, parsed = hermes.parse_assistant(assistant_text(Message("assistant", "Two calls.", calls)))
    assert content == "Two calls."
    assert [(c.name, json.loads(c.arguments)) for c in parsed] == [("get_weather", {"city": "Oslo"}), ("noop", {})]


def test_formats_by_name_or_import_path(tokenizer):
    assert isinstance(get_chat_format("hermes", tokenizer), HermesFormat)
    assert isinstance(get_chat_format("loongsage.agentflow.router.chat_format:HermesFormat", tokenizer), HermesFormat)
    with pytest.raises(ValueError, match="unknown chat format 'qwen9'.*hermes"):
        get_chat_format("qwen9", tokenizer)


# A template that, like many, allows a system message only first.
SYSTEM_FIRST_TEMPLATE = (
    "{% for m in messages %}{% if m.role == 'system' and not loop.first %}"
    "{{ raise_exception('System message must be at the beginning.') }}{% endif %}"
    "<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_a_late_system_message_is_rendered_in_place_where_the_template_allows(hermes):
    assert hermes.system_anywhere  # SmolLM2's ChatML
    messages = [
        Message("system", "Be brief."),
        Message("user", "Hi"),
        Message("system", "Reminder: tests."),
        Message("user", "Go"),
    ]
    rendered = hermes.render(messages, [])
    assert "<|im_start|>user\nHi<|im_end|>\n<|im_start|>system\nReminder: tests.<|im_end|>\n<|im_start|>user\nGo" in rendered


def test_a_late_system_message_is_folded_into_the_next_user_turn_elsewhere(tiny_model_path):
    tokenizer = load_tokenizer(tiny_model_path)
    tokenizer.chat_template = SYSTEM_FIRST_TEMPLATE
    strict = HermesFormat(tokenizer)
    assert not strict.system_anywhere
    messages = [
        Message("system", "Be brief."),
        Message("user", "Hi"),
        Message("assistant", "Hello"),
        Message("system", "Reminder: tests."),
        Message("system", "Mode: plan."),
        Message("user", "Go"),
        Message("system", "Last word."),
    ]
    rendered = strict.render(messages, [])
    assert rendered.startswith("<|im_start|>system\nBe brief.<|im_end|>")  # the first stays a system turn
    assert "<|im_start|>user\nReminder: tests.\n\nMode: plan.\n\nGo<|im_end|>" in rendered
    assert rendered.endswith("<|im_start|>user\nLast word.<|im_end|>\n<|im_start|>assistant\n")
    assert rendered.count("<|im_start|>system") == 1


# A cut-down Qwen3 template: its thinking switch closes an empty thinking block in the prompt.
THINKING_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}{% endif %}"
)


def test_the_thinking_switch_is_set_where_the_template_has_one(tiny_model_path, hermes):
    tokenizer = load_tokenizer(tiny_model_path)
    tokenizer.chat_template = THINKING_TEMPLATE
    thinking = HermesFormat(tokenizer)
    assert thinking.thinking_switch and not hermes.thinking_switch
    messages = [Message("user", "Hi")]
    assert thinking.render(messages, [], thinking=False).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert thinking.render(messages, [], thinking=True).endswith("<|im_start|>assistant\n")
    assert thinking.render(messages, []) == thinking.render(messages, [], thinking=True)  # the template's default
    assert hermes.render(messages, [], thinking=False) == hermes.render(messages, [])  # no switch: unchanged


@pytest.mark.parametrize(
    ("reply", "thinking", "rest"),
    [
        ("<think>\nLet me see.\n</think>\n\nParis.", "Let me see.", "Paris."),
        ("Let me see.</think>Paris.", "Let me see.", "Paris."),  # the template opened the block in the prompt
        ("<think>\nStill thinking", "Still thinking", ""),  # cut off at max_tokens
        ("<think>\n\n</think>\n\nParis.", "", "Paris."),  # thinking off: an empty block
        ("Paris.", "", "Paris."),
        ("Use <think> tags.", "", "Use <think> tags."),
    ],
)
def test_split_thinking(reply, thinking, rest):
    assert split_thinking(reply) == (thinking, rest)
