"""OpenCode (npm `opencode-ai`), run unmodified as a black-box agent inside the episode's sandbox.

OpenCode runs its tools itself (bash, file reads and edits), so it runs in the sandbox
(`BlackBoxAgent` with `in_sandbox`), reaching the router through the bridge when the sandbox
has no network. Everything is set through OpenCode's own configuration (the JSON it reads from
OPENCODE_CONFIG_CONTENT, its environment variables, a fresh state directory): nothing of it is
patched. What the preset sets, and why:

- one provider, `loongsage`, on the episode's base URL and key (`@ai-sdk/openai-compatible`,
  bundled in the binary), with the served model under its own name: OpenCode sends the key
  of the model entry as `model`. It calls streaming chat completions with tools, nothing else;
- `max_tokens`: OpenCode always sends its model's output limit as max_tokens (32000 when
  unset, past any small model's context), so the preset sets that limit; temperature and
  top_p are left to the run (OpenCode sends none: `rollout.*` applies);
- the tool set (`tools`; default bash, read, edit, write) through `permission` (a tool
  denied is not offered): the rest cost context (task, todowrite, webfetch: about 8k
  characters of schemas) or need what a sandbox lacks (glob and grep fetch ripgrep, webfetch
  the network). Its six default tools' schemas are about 12k characters; these four, about 9k.
  OpenCode grants `write` with `edit` (one permission), so `edit` always brings `write`;
- the tools' descriptions, when `tool_descriptions` names some: OpenCode's own are written for
  large models (read, edit and write: about 800 SmolLM2 tokens, more than the rest of a
  SWE episode), so a recipe for a small model gives short ones. They are set through
  OpenCode's plugin hook for exactly this (`tool.definition`), by a plugin file in the
  episode's config directory; the parameters' schemas stay OpenCode's;
- the system prompt: `data.system_prompt` when set, else a short one (OpenCode's own is about
  9,600 characters, a third of a small model's context), through `agent.build.prompt`;
  OpenCode appends its environment block (working directory, platform, date);
- every side call off: title generation, compaction (which would rewrite the history and so
  start a new branch), pruning of old tool output (the same), sharing, snapshots, LSP, the
  model catalog fetch, auto-update; and permissions that would "ask" allowed, because
  `opencode run` rejects an ask and stops;
- a fresh HOME / XDG / TMPDIR per episode, with the plugin stub that stops OpenCode's npm
  install of its plugin package at every start (offline that install blocks startup ~70 s).

The episode ends when OpenCode does: after a reply with no tool call, or when a request fails
(the router's 400 when the conversation no longer fits the context). Its patch is graded as
any agent's.

Demonstrations (warm start) go through OpenCode too (`replay.py`): a task's gold calls
(str_replace per change, then submit) become OpenCode's own calls, `read` then `edit` per file
(its edit refuses a file not read first) and a closing reply; OpenCode runs them for real
against a scripted endpoint, and the conversation it sent is what the warm start trains on.
"""

from __future__ import annotations

import json

from loongsage.agentflow.agents.base import AgentResult, AgentTask, Endpoint
from loongsage.agentflow.agents.blackbox import BlackBoxAgent
from loongsage.agentflow.agents.programs import check_memory_floor, program_binary, program_version
from loongsage.agentflow.agents.replay import read_then_edit_calls, record_demonstration, reply
from loongsage.agentflow.router.messages import ToolCall

PROVIDER = "loongsage"
DEFAULT_TOOLS = ("bash", "read", "edit", "write")
KNOWN_TOOLS = (
    *DEFAULT_TOOLS,
    *("glob", "grep", "list", "patch", "webfetch", "websearch", "task", "todowrite", "todoread", "skill", "question"),
)
CLOSING_REPLY = "I fixed the bug."  # a demonstration's last reply: no tool call, so OpenCode stops
DEFAULT_PROMPT = (
    "You are a coding agent working in a git repository. Use the tools to read, edit and test "
    "the code until the task is solved. When finished, reply with a short summary and no tool calls."
)
# RLIMIT_AS OpenCode's runtime (Bun) needs: it aborts at start under 4 GiB of address space
# (measured: 2048 and 3072 MiB crash, 4096 MiB runs), though it uses a fraction of that.
MIN_MEMORY_MB = 4096
OFF = {
    name: "1"
    for name in (
        "OPENCODE_DISABLE_MODELS_FETCH",
        "OPENCODE_DISABLE_AUTOUPDATE",
        "OPENCODE_DISABLE_SHARE",
        "OPENCODE_DISABLE_LSP_DOWNLOAD",
        "OPENCODE_DISABLE_DEFAULT_PLUGINS",
        "OPENCODE_DISABLE_CLAUDE_CODE",
        "OPENCODE_DISABLE_EXTERNAL_SKILLS",
        "OPENCODE_DISABLE_AUTOCOMPACT",
        "OPENCODE_DISABLE_PRUNE",
    )
}
# One episode: fresh state, the plugin stub, the prompt on stdin (as an argument, a prompt with
# spaces reaches the model wrapped in quotes). $1 prompt, $2 model. No braces: the agent's
# command arguments are templates. TMPDIR stays /tmp (private to the sandbox under bwrap): the
# bash tool's description names it, and a random one would make no two episodes' prompts alike.
EPISODE = """set -e
state=$(mktemp -d)
trap 'rm -rf "$state"' EXIT
mkdir -p "$state/config/opencode/node_modules" "$state/home" "$state/data" "$state/cache" "$state/state"
printf '%s' "$LOONGSAGE_OPENCODE_STUB_PACKAGE" > "$state/config/opencode/package.json"
printf '%s' "$LOONGSAGE_OPENCODE_STUB_LOCK" > "$state/config/opencode/package-lock.json"
if [ -n "$LOONGSAGE_OPENCODE_PLUGIN" ]; then
  mkdir -p "$state/config/opencode/plugins"
  printf '%s' "$LOONGSAGE_OPENCODE_PLUGIN" > "$state/config/opencode/plugins/loongsage.js"
fi
export HOME="$state/home" XDG_CONFIG_HOME="$state/config" XDG_DATA_HOME="$state/data"
export XDG_CACHE_HOME="$state/cache" XDG_STATE_HOME="$state/state" TMPDIR=/tmp SHELL=/bin/bash
printf '%s' "$1" | "$LOONGSAGE_OPENCODE" run --format json --dir "$PWD" -m "loongsage/$2"
"""
# OpenCode's plugin API (a server plugin's `tool.definition` hook): each tool named in
# LOONGSAGE_OPENCODE_TOOL_DESCRIPTIONS gets that description.
DESCRIPTIONS_PLUGIN = """const descriptions = JSON.parse(process.env.LOONGSAGE_OPENCODE_TOOL_DESCRIPTIONS || "{}");
export const LoongSageToolDescriptions = async () => ({
  "tool.definition": async (input, output) => {
    if (Object.hasOwn(descriptions, input.toolID)) output.description = descriptions[input.toolID];
  },
});
"""


class OpenCodeAgent:
    """`agent.name=opencode`. `tools`: OpenCode's tools to offer; `max_tokens`: what each request
    asks for (see above); `timeout_s`: the whole episode; `bash_timeout_s`: one bash command;
    `tool_descriptions`: {tool: description} in place of OpenCode's own (see above)."""

    def __init__(
        self,
        tools: tuple[str, ...] | list[str] = DEFAULT_TOOLS,
        max_tokens: int = 256,
        timeout_s: float = 900.0,
        bash_timeout_s: float = 60.0,
        tool_descriptions: dict[str, str] | None = None,
    ):
        unknown = sorted(set(tools) - set(KNOWN_TOOLS))
        if unknown:
            raise ValueError(f"agent opencode: unknown tools {unknown} (OpenCode's: {', '.join(KNOWN_TOOLS)})")
        if max_tokens < 1:
            raise ValueError(f"agent opencode: max_tokens={max_tokens} must be >= 1")
        if "write" in tools and "edit" not in tools:
            raise ValueError("agent opencode: tools has write without edit; OpenCode grants both or neither (one permission)")
        self.tools, self.max_tokens, self.timeout_s = tuple(tools), max_tokens, timeout_s
        self.tool_descriptions = _checked_descriptions(dict(tool_descriptions or {}), self.offered_tools())
        self.bash_timeout_ms = int(bash_timeout_s * 1000)
        self.binary = program_binary("opencode", "opencode", "npm install -g opencode-ai")
        self.version = program_version("opencode", self.binary, OFF)

    def run(self, task: AgentTask, endpoint: Endpoint) -> AgentResult:
        check_memory_floor("opencode", task, MIN_MEMORY_MB, f"OpenCode's runtime aborts at start under {MIN_MEMORY_MB}")
        config = self.config(endpoint.model, task.system_prompt or DEFAULT_PROMPT)
        stub = {"dependencies": {"@opencode-ai/plugin": self.version}}
        env = {
            **OFF,
            "OPENCODE_CONFIG_CONTENT": json.dumps(config),
            "OPENCODE_EXPERIMENTAL_BASH_DEFAULT_TIMEOUT_MS": str(self.bash_timeout_ms),
            "LOONGSAGE_OPENCODE": self.binary,
            "LOONGSAGE_OPENCODE_STUB_PACKAGE": json.dumps(stub),
            "LOONGSAGE_OPENCODE_STUB_LOCK": json.dumps(
                {"name": "opencode", "lockfileVersion": 3, "requires": True, "packages": {"": stub}}
            ),
        }
        if self.tool_descriptions:
            env["LOONGSAGE_OPENCODE_PLUGIN"] = DESCRIPTIONS_PLUGIN
            env["LOONGSAGE_OPENCODE_TOOL_DESCRIPTIONS"] = json.dumps(self.tool_descriptions)
        command = ("bash", "-c", EPISODE, "opencode-episode", "{prompt}", "{model}")
        agent = BlackBoxAgent(command=command, env=env, in_sandbox=True, timeout_s=self.timeout_s)
        return agent.run(task, endpoint)

    def demonstration(self, task: AgentTask, calls: list[dict], model: str) -> dict:
        """The chat request an episode ends with when the model makes `calls` (str_replace and
        submit, as SWE tasks give them), recorded through OpenCode itself in the task's sandbox."""
        if task.sandbox is None:
            raise ValueError(f"agent opencode: demonstration {task.instance_id!r} needs the task's sandbox")
        replies = [*(reply(tool_calls=[c]) for c in opencode_calls(calls, task.sandbox.workdir)), reply(CLOSING_REPLY)]
        body = record_demonstration("opencode", self.run, task, replies, model)
        self._check_descriptions_applied(body["tools"])
        return body

    def _check_descriptions_applied(self, tools: list[dict]) -> None:
        """OpenCode loads the descriptions plugin or skips it without a word (a version whose
        hook changed, say): then the warm start would train on its long descriptions while the
        recipe says short ones. Refused instead, naming the tools."""
        sent = {tool["function"]["name"]: tool["function"].get("description") for tool in tools}
        ignored = sorted(name for name, text in self.tool_descriptions.items() if sent.get(name) != text)
        if ignored:
            raise ValueError(
                f"agent opencode: OpenCode {self.version} did not apply tool_descriptions for {ignored} "
                "(its tool.definition plugin hook); its own descriptions were sent"
            )

    def offered_tools(self) -> tuple[str, ...]:
        """The tools OpenCode offers: those asked for, and `write` with `edit` (one permission)."""
        return tuple(sorted({*self.tools, *(("write",) if "edit" in self.tools else ())}))

    def config(self, model: str, prompt: str) -> dict:
        """OpenCode's configuration for one episode (its schema: https://opencode.ai/config.json)."""
        denied = {tool: "deny" for tool in KNOWN_TOOLS if tool not in self.offered_tools()}
        return {
            "$schema": "https://opencode.ai/config.json",
            "model": f"{PROVIDER}/{model}",
            "small_model": f"{PROVIDER}/{model}",
            "enabled_providers": [PROVIDER],
            "autoupdate": False,
            "share": "disabled",
            "snapshot": False,
            "lsp": False,
            "formatter": False,
            "compaction": {"auto": False, "prune": False},
            "provider": {
                PROVIDER: {
                    "npm": "@ai-sdk/openai-compatible",
                    "name": "LoongSage router",
                    "options": {"baseURL": "{env:OPENAI_BASE_URL}", "apiKey": "{env:OPENAI_API_KEY}", "timeout": 600000},
                    # The context limit only paces compaction, which is off; the router enforces the real one.
                    "models": {
                        model: {"name": model, "tool_call": True, "limit": {"context": 1 << 20, "output": self.max_tokens}}
                    },
                }
            },
            # The last matching rule wins: "*" first.
            "permission": {"*": "allow", "external_directory": "allow", "doom_loop": "allow", **denied},
            "agent": {"title": {"disable": True}, "build": {"prompt": prompt}},
        }


def opencode_calls(calls: list[dict], workdir: str) -> list[ToolCall]:
    """OpenCode's tool calls for a task's gold calls: `read` before the first `edit` of a file,
    `edit` per str_replace."""
    steps = read_then_edit_calls(
        "opencode",
        calls,
        workdir,
        read=lambda path: {"read": {"filePath": path}},
        edit=lambda path, old, new: {"edit": {"filePath": path, "oldString": old, "newString": new}},
    )
    return [ToolCall(f"call_demo_{i}", name, json.dumps(args)) for i, (name, args) in enumerate(steps)]


def _checked_descriptions(descriptions: dict[str, str], offered: tuple[str, ...]) -> dict[str, str]:
    """A description for a tool that is not offered would select nothing: refused, by name."""
    stray = sorted(set(descriptions) - set(offered))
    if stray:
        raise ValueError(
            f"agent opencode: tool_descriptions names {stray}, which are not offered (offered: {', '.join(offered)})"
        )
    empty = sorted(name for name, text in descriptions.items() if not isinstance(text, str) or not text.strip())
    if empty:
        raise ValueError(f"agent opencode: tool_descriptions for {empty} must be non-empty text")
    return descriptions
