"""Every chat format is constructed by get_chat_format with the tokenizer alone, and the
router calls `render(messages, tools, thinking)` and `parse_assistant(text)` on it."""

from __future__ import annotations

import pytest

from loongsage.agentflow.router.chat_format import CHAT_FORMATS
from loongsage.agentflow.router.messages import Message
from loongsage.models import load_tokenizer
from tests.plugin_contracts.call_shapes import ANY, accepts, method_problems

ROUTER_CALLS = {"render": (ANY, ANY, ANY), "parse_assistant": (ANY,)}


@pytest.mark.parametrize("name", sorted(CHAT_FORMATS))
def test_format_has_the_shape_the_router_calls(name):
    assert accepts(CHAT_FORMATS[name], ANY), f"{name}: not constructible from the tokenizer alone"
    assert method_problems(CHAT_FORMATS[name], ROUTER_CALLS) == []


@pytest.mark.parametrize("name", sorted(CHAT_FORMATS))
def test_format_renders_a_prompt_and_keeps_plain_text_as_content(name, tiny_model_path):
    chat_format = CHAT_FORMATS[name](load_tokenizer(tiny_model_path))
    prompt = chat_format.render([Message("user", "What is 2 + 2?")], [])
    assert isinstance(prompt, str) and "What is 2 + 2?" in prompt
    assert chat_format.parse_assistant("It is 4.") == ("It is 4.", [])
