"""Chat formats: messages (+ tools) -> prompt text, and generated text -> content + tool calls.

A format is chosen by registry name or import path ("my_pkg.formats:MyFormat"), constructed
with the tokenizer. The built-in `hermes` format uses the tokenizer's own chat template; when
that template knows no tools (SmolLM2's ChatML does not), it describes the tools in the system
message and carries calls and results in Hermes/Qwen markup:

    <tools>\n{"type": "function", "function": {...}}\n</tools>          (system message)
    <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>        (assistant turn)
    <tool_response>\n...\n</tool_response>                            (a user turn)

A template that reads `tools` itself (Qwen2.5, Hermes models) is given the tools, the
`tool_calls` and the `tool` messages unchanged.

A system message after the first message (Claude Code sends them inside `messages`) is rendered
in place where the template renders a system turn there (ChatML templates, SmolLM2's, Qwen's);
where it does not (it raises, as many templates do, or drops it), its text is folded into the
next user message, ahead of that message's own text.

Thinking: a request may ask for the model's thinking on or off (Anthropic `thinking`, Responses
`reasoning.effort`); where the template has a switch for it (Qwen3's `enable_thinking`) the
render sets it, elsewhere the request's choice is ignored (the model thinks as it was trained
to). `split_thinking` takes the thinking text out of a reply (`<think>...</think>`) for the
front ends to return as thinking blocks / reasoning items.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Protocol

from loongsage.agentflow.router.errors import bad_request
from loongsage.agentflow.router.messages import Message, ToolCall
from loongsage.registry import Registry

TOOL_CALL_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
TOOLS_PREAMBLE = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
)
TOOLS_POSTAMBLE = (
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)


class ChatFormat(Protocol):
    def render(self, messages: list[Message], tools: list[dict], thinking: bool | None = None) -> str:
        """The whole prompt text, ending with the opening of the assistant's turn; `thinking` on or
        off where the model has a switch for it (None: its default)."""

    def parse_assistant(self, text: str) -> tuple[str, list[ToolCall]]:
        """Content and tool calls of generated text. Never raises: what does not parse stays content."""


def new_tool_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


class HermesFormat:
    def __init__(self, tokenizer, new_id: Callable[[], str] = new_tool_call_id):
        template = tokenizer.chat_template
        if isinstance(template, dict):  # several named templates: the default one renders chats
            template = template.get("default") or next(iter(template.values()), None)
        if not template:
            raise ValueError(f"tokenizer {getattr(tokenizer, 'name_or_path', '')!r} has no chat template")
        self.tokenizer = tokenizer
        self.native_tools = re.search(r"\btools\b", template) is not None
        self.system_anywhere = _renders_system_anywhere(tokenizer)
        self.thinking_switch = THINKING_SWITCH in template
        self.new_id = new_id

    def render(self, messages: list[Message], tools: list[dict], thinking: bool | None = None) -> str:
        switch = {THINKING_SWITCH: thinking} if self.thinking_switch and thinking is not None else {}
        if not self.system_anywhere:
            messages = fold_late_system_messages(messages)
        if self.native_tools:
            chat, template_tools = [_native_message(m) for m in messages], tools or None
        else:
            chat, template_tools = _hermes_messages(messages, tools, self.describe_tools), None
        try:
            return self.tokenizer.apply_chat_template(
                chat, tools=template_tools, tokenize=False, add_generation_prompt=True, **switch
            )
        except Exception as exc:  # jinja raises its own TemplateError, and templates raise_exception(...)
            raise bad_request(f"the model's chat template refused these messages: {exc}", "messages") from exc

    @staticmethod
    def describe_tools(tools: list[dict]) -> str:
        schemas = "\n".join(json.dumps({"type": "function", "function": t}, ensure_ascii=False) for t in tools)
        return TOOLS_PREAMBLE + schemas + TOOLS_POSTAMBLE

    def parse_assistant(self, text: str) -> tuple[str, list[ToolCall]]:
        calls: list[ToolCall] = []
        kept: list[str] = []
        position = 0
        for block in TOOL_CALL_BLOCK.finditer(text):
            call = self._tool_call(block.group(1))
            if call is None:
                continue  # malformed: the block stays in the content
            kept.append(text[position : block.start()])
            position = block.end()
            calls.append(call)
        if not calls:
            return text, []
        kept.append(text[position:])
        return "".join(kept).strip(), calls

    def _tool_call(self, body: str) -> ToolCall | None:
        try:
            call = json.loads(body)
        except json.JSONDecodeError:
            return None
        if not isinstance(call, dict) or not isinstance(call.get("name"), str) or not call["name"]:
            return None
        arguments = call.get("arguments", call.get("parameters", {}))
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError:
                return None
        if not isinstance(arguments, dict):
            return None
        return ToolCall(self.new_id(), call["name"], json.dumps(arguments, ensure_ascii=False))


SYSTEM_PROBE = "loongsage-system-probe"
THINKING_SWITCH = "enable_thinking"  # the chat-template variable Qwen3 (and others after it) read
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


def split_thinking(text: str) -> tuple[str, str]:
    """(thinking, the rest) of a reply: the text of a leading `<think>...</think>` block, or, where
    the template opened the block in the prompt, everything before a `</think>` the reply has
    without an opening one. ("", text) for a reply without thinking."""
    stripped = text.lstrip()
    if stripped.startswith(THINK_OPEN):
        body = stripped[len(THINK_OPEN) :]
        if THINK_CLOSE not in body:  # cut off while thinking: all of it is thinking
            return body.strip(), ""
        thinking, rest = body.split(THINK_CLOSE, 1)
        return thinking.strip(), rest.lstrip()
    if THINK_CLOSE in text and THINK_OPEN not in text:
        thinking, rest = text.split(THINK_CLOSE, 1)
        return thinking.strip(), rest.lstrip()
    return "", text


def _renders_system_anywhere(tokenizer) -> bool:
    """Whether the chat template renders a system message that is not the first message, in place."""
    probe = [{"role": "user", "content": "a"}, {"role": "system", "content": SYSTEM_PROBE}, {"role": "user", "content": "b"}]
    try:
        text = tokenizer.apply_chat_template(probe, tokenize=False, add_generation_prompt=True)
    except Exception:  # the template refuses it (raise_exception), or cannot render the probe at all
        return False
    return SYSTEM_PROBE in text


def fold_late_system_messages(messages: list[Message]) -> list[Message]:
    """Each system message after the first message, folded into the next user message (its text
    first); one with no user message after it becomes one."""
    folded: list[Message] = []
    pending: list[str] = []
    for index, message in enumerate(messages):
        if message.role == "system" and index > 0:
            pending.append(message.content)
            continue
        if pending and message.role == "user":
            message = replace(message, content="\n\n".join([*pending, message.content]))
            pending = []
        folded.append(message)
    if pending:
        folded.append(Message("user", "\n\n".join(pending)))
    return folded


def _native_message(message: Message) -> dict:
    chat: dict = {"role": message.role, "content": message.content}
    if message.tool_calls:
        chat["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments_object()}}
            for c in message.tool_calls
        ]
    if message.tool_call_id is not None:
        chat["tool_call_id"] = message.tool_call_id
    if message.name is not None:
        chat["name"] = message.name
    return chat


def _hermes_messages(messages: list[Message], tools: list[dict], describe: Callable[[list[dict]], str]) -> list[dict]:
    chat: list[dict] = []
    previous_role = None
    for message in messages:
        if message.role == "tool":
            response = f"<tool_response>\n{message.content}\n</tool_response>"
            if previous_role == "tool":  # results of one round of calls share one user turn
                chat[-1]["content"] += "\n" + response
            else:
                chat.append({"role": "user", "content": response})
        elif message.role == "assistant" and message.tool_calls:
            chat.append({"role": "assistant", "content": assistant_text(message)})
        else:
            chat.append({"role": message.role, "content": message.content})
        previous_role = message.role
    if tools:
        _add_to_system(chat, describe(tools))
    return chat


def assistant_text(message: Message) -> str:
    """An assistant message with tool calls, written the way the Hermes format has the model write it."""
    calls = [
        "<tool_call>\n" + json.dumps({"name": c.name, "arguments": c.arguments_object()}, ensure_ascii=False) + "\n</tool_call>"
        for c in message.tool_calls
    ]
    return "\n".join(([message.content] if message.content else []) + calls)


def _add_to_system(chat: list[dict], block: str) -> None:
    if chat and chat[0]["role"] == "system":
        system = chat[0]["content"]
        chat[0] = {"role": "system", "content": (system + "\n\n" if system else "") + block}
    else:
        chat.insert(0, {"role": "system", "content": block})


class CompactHermesFormat(HermesFormat):
    """Hermes markup with each tool described in one line instead of its JSON schema: about
    a fifth of the tokens, which matters to small models with short contexts and on CPUs.

        Tools:
        - str_replace(path, old_str, new_str): Replace the one occurrence of old_str ...
    """

    @staticmethod
    def describe_tools(tools: list[dict]) -> str:
        lines = ["Tools:"]
        for tool in tools:
            parameters = ", ".join(tool.get("parameters", {}).get("properties", {}))
            lines.append(f"- {tool['name']}({parameters}): {tool.get('description', '')}".rstrip(": "))
        lines.append('Call a tool as:\n<tool_call>\n{"name": <tool-name>, "arguments": <args-json-object>}\n</tool_call>')
        return "\n".join(lines)


# An entry is constructed with the tokenizer alone and makes a ChatFormat (render, parse_assistant).
CHAT_FORMATS: Registry[Callable[..., ChatFormat]] = Registry("chat format")
CHAT_FORMATS.register("hermes", HermesFormat)
CHAT_FORMATS.register("hermes_compact", CompactHermesFormat)


def get_chat_format(name_or_path: str, tokenizer) -> ChatFormat:
    return CHAT_FORMATS.get(name_or_path)(tokenizer)
