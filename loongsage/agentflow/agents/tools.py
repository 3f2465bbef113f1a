"""The white-box agent's tools and their execution in the task's sandbox.

Every failure a model can cause (unknown tool, arguments that are not JSON, a missing file, an
ambiguous edit, a command that times out) comes back as the tool's text result, so the model
sees what went wrong and the episode goes on; nothing here raises into the agent loop.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from loongsage.agentflow.sandbox import Sandbox

TOOL_SCHEMAS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a bash command in the repository and return its output.",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Return the content of a file (path relative to the repository).",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "write_file",
            "description": "Create or overwrite a file with the given content.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                "required": ["path", "content"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "str_replace",
            "description": "Replace the one occurrence of old_str in a file by new_str.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "old_str": {"type": "string"}, "new_str": {"type": "string"}},
                "required": ["path", "old_str", "new_str"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "submit",
            "description": "Finish the task (optionally with a final answer).",
            "parameters": {"type": "object", "properties": {"answer": {"type": "string"}}},
        },
    },
]
TOOL_NAMES = tuple(schema["function"]["name"] for schema in TOOL_SCHEMAS)
REQUIRED_ARGUMENTS = {s["function"]["name"]: s["function"]["parameters"].get("required", []) for s in TOOL_SCHEMAS}


@dataclass
class ToolOutcome:
    text: str  # what goes back to the model as the tool message
    submitted: bool = False
    answer: str | None = None


def truncate_middle(text: str, limit: int) -> str:
    """Head and tail of a long output: errors tend to sit at the end, context at the start."""
    if len(text) <= limit:
        return text
    head = limit // 2
    tail = limit - head
    return f"{text[:head]}\n[... {len(text) - limit} characters omitted ...]\n{text[-tail:]}"


def run_tool(name: str, raw_arguments: str, sandbox: Sandbox | None, command_timeout_s: float) -> ToolOutcome:
    if name not in TOOL_NAMES:
        return ToolOutcome(f"error: unknown tool {name!r}; available tools: {', '.join(TOOL_NAMES)}")
    try:
        arguments = json.loads(raw_arguments or "{}")
    except json.JSONDecodeError as exc:
        return ToolOutcome(f"error: the arguments of {name} are not valid JSON ({exc.msg} at position {exc.pos})")
    if not isinstance(arguments, dict):
        return ToolOutcome(f"error: the arguments of {name} must be a JSON object")
    if name == "submit":
        answer = arguments.get("answer")
        return ToolOutcome("submitted", submitted=True, answer=None if answer is None else str(answer))
    if sandbox is None:
        return ToolOutcome(f"error: {name} needs a workspace and this task has none")
    missing = [key for key in REQUIRED_ARGUMENTS[name] if not isinstance(arguments.get(key), str)]
    if missing:
        return ToolOutcome(f"error: {name} needs string argument(s) {', '.join(missing)}")
    try:
        return ToolOutcome(_RUNNERS[name](sandbox, arguments, command_timeout_s))
    except Exception as exc:  # the sandbox names the path or limit at fault
        return ToolOutcome(f"error: {exc}")


def _bash(sandbox: Sandbox, arguments: dict, timeout_s: float) -> str:
    result = sandbox.exec(arguments["command"], timeout_s=timeout_s)
    status = "timed out" if result.timed_out else f"exit code {result.exit_code}"
    parts = [status]
    if result.stdout:
        parts.append(result.stdout.rstrip("\n"))
    if result.stderr:
        parts.append("stderr:\n" + result.stderr.rstrip("\n"))
    return "\n".join(parts)


def _read_file(sandbox: Sandbox, arguments: dict, _: float) -> str:
    return sandbox.read_file(arguments["path"])


def _write_file(sandbox: Sandbox, arguments: dict, _: float) -> str:
    sandbox.write_file(arguments["path"], arguments["content"])
    return f"wrote {len(arguments['content'])} characters to {arguments['path']}"


def _str_replace(sandbox: Sandbox, arguments: dict, _: float) -> str:
    path, old, new = arguments["path"], arguments["old_str"], arguments["new_str"]
    content = sandbox.read_file(path)
    count = content.count(old) if old else 0
    if count != 1:
        found = "not found" if count == 0 else f"found {count} times; include more context to make it unique"
        return f"error: old_str {found} in {path}"
    sandbox.write_file(path, content.replace(old, new, 1))
    return f"replaced 1 occurrence in {path}"


_RUNNERS = {"bash": _bash, "read_file": _read_file, "write_file": _write_file, "str_replace": _str_replace}
