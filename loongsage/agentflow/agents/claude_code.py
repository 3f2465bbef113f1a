"""Claude Code (npm `@anthropic-ai/claude-code`), run unmodified as a black-box agent inside the
episode's sandbox.

Claude Code runs its tools itself, so it runs in the sandbox (`BlackBoxAgent` with
`in_sandbox`), reaching the router through the bridge when the sandbox has no network. It is set
only through its own configuration (a settings file in a fresh CLAUDE_CONFIG_DIR, its
environment variables and command-line flags): nothing of it is patched. What the preset sets,
and why (measured on 2.1.332; docs/agent_fields.md says what the router does with what it sends):

- the provider: ANTHROPIC_BASE_URL (the episode's base URL; Claude Code appends /v1/messages,
  which the router also answers under /v1/v1) and ANTHROPIC_AUTH_TOKEN (the episode's key,
  sent as a bearer token); the served model by `--model`, and the names it would pick for side
  calls and sub-agents (ANTHROPIC_DEFAULT_{HAIKU,SONNET,OPUS}_MODEL, ANTHROPIC_SMALL_FAST_MODEL,
  CLAUDE_CODE_SUBAGENT_MODEL) the served model too, so no request names a Claude model;
- every side call off: CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC (without it Claude Code also
  probes the base URL and reaches for api.anthropic.com: bootstrap, telemetry, MCP registry),
  telemetry, error reporting and the auto-updater; then the only traffic is one
  `POST /v1/messages` per model turn;
- `--bare` (by default): Claude Code's own minimal mode, a 196-character system prompt and three
  tools (Bash, Edit, Read) with one-line descriptions, about 1,100 SmolLM2 tokens, where its
  default profile for an unknown model name sends ~7,000 characters of system prompt, 12 tools
  (18,000 characters) and the environment as a system message inside `messages`. `bare=false`
  with `tools` picks from its full tool set instead (`--tools`);
- `data.system_prompt`, when set, in place of its system prompt (`--system-prompt`);
- thinking off (CLAUDE_CODE_DISABLE_THINKING) unless `thinking`: the models trained here have no
  thinking switch, and with thinking Claude Code also sends context_management;
- the billing attribution header (`x-anthropic-billing-header: cc_version=...`, the first system
  block) off, so a prompt does not change with Claude Code's build; prompt caching markers off;
- `max_tokens` (CLAUDE_CODE_MAX_OUTPUT_TOKENS: Claude Code asks for 32000 unless told), the turn
  limit (`--max-turns`), permission to run its tools without asking (`--permission-mode
  acceptEdits` and `permissions.allow`; its bypass mode is refused as root), no session
  transcript (`--no-session-persistence`), and HOME, CLAUDE_CONFIG_DIR and TMPDIR in a fresh
  directory per episode.

The episode ends when Claude Code does: after a reply with no tool call, at the turn limit, when
a request fails, or after replies cut at `max_tokens`, which Claude Code asks for again a few
times and then takes as an error ("response exceeded the N output token maximum", exit code 1).
Claude Code's runtime (Bun) aborts under about 800 MiB of address space (measured: 768 MiB
aborts, 832 runs), so the sandbox needs `memory_mb >= MIN_MEMORY_MB`.

Demonstrations (warm start) go through Claude Code too (`replay.py`): a task's gold calls
(str_replace per change, then submit) become its own calls, `Read` then `Edit` per file (its
Edit refuses a file not read first), and a closing reply.
"""

from __future__ import annotations

import json

from loongsage.agentflow.agents.base import AgentResult, AgentTask, Endpoint
from loongsage.agentflow.agents.blackbox import BlackBoxAgent
from loongsage.agentflow.agents.programs import check_memory_floor, program_binary, program_version
from loongsage.agentflow.agents.replay import read_then_edit_calls, record_demonstration, reply
from loongsage.agentflow.router.messages import ToolCall

BARE_TOOLS = ("Bash", "Edit", "Read")  # what --bare offers
KNOWN_TOOLS = (*BARE_TOOLS, "Write", "Glob", "Grep", "NotebookEdit", "TodoWrite", "WebFetch", "WebSearch", "Agent", "Skill")
CLOSING_REPLY = "I fixed the bug."  # a demonstration's last reply: no tool call, so Claude Code stops
MIN_MEMORY_MB = 1024  # RLIMIT_AS: its runtime aborts under ~800 MiB (see above); its Bash tool needs some more
OFF = {
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_AUTOUPDATER": "1",
    "CLAUDE_CODE_ATTRIBUTION_HEADER": "0",
    "DISABLE_PROMPT_CACHING": "1",
}
SIDE_MODELS = (
    "ANTHROPIC_DEFAULT_HAIKU_MODEL",
    "ANTHROPIC_DEFAULT_SONNET_MODEL",
    "ANTHROPIC_DEFAULT_OPUS_MODEL",
    "ANTHROPIC_SMALL_FAST_MODEL",
    "CLAUDE_CODE_SUBAGENT_MODEL",
)
# One episode: fresh state, then Claude Code with the prompt. $1 prompt, $2 base URL, $3 key,
# $4 model. No braces: the agent's command arguments are templates.
EPISODE = """set -e
state=$(mktemp -d)
trap 'rm -rf "$state"' EXIT
mkdir -p "$state/tmp"
printf '%s' "$LOONGSAGE_CLAUDE_SETTINGS" > "$state/settings.json"
export HOME="$state" CLAUDE_CONFIG_DIR="$state" TMPDIR="$state/tmp" ANTHROPIC_BASE_URL="$2" ANTHROPIC_AUTH_TOKEN="$3"
for name in $LOONGSAGE_CLAUDE_SIDE_MODELS; do export "$name=$4"; done
prompt="$1" model="$4"
set -- -p "$prompt" --model "$model" --permission-mode acceptEdits --no-session-persistence
set -- "$@" --max-turns "$LOONGSAGE_CLAUDE_MAX_TURNS"
if [ -n "$LOONGSAGE_CLAUDE_BARE" ]; then set -- "$@" --bare; fi
if [ -n "$LOONGSAGE_CLAUDE_TOOLS" ]; then set -- "$@" --tools "$LOONGSAGE_CLAUDE_TOOLS"; fi
if [ -n "$LOONGSAGE_CLAUDE_SYSTEM_PROMPT" ]; then set -- "$@" --system-prompt "$LOONGSAGE_CLAUDE_SYSTEM_PROMPT"; fi
"$LOONGSAGE_CLAUDE" "$@"
"""


class ClaudeCodeAgent:
    """`agent.name=claude_code`. `bare`: Claude Code's minimal mode and its three tools (see
    above); `tools`: with bare=false, the tools to offer; `max_tokens`: what each request asks
    for; `max_turns`: model turns per episode; `thinking`: leave its thinking on; `timeout_s`:
    the whole episode."""

    def __init__(
        self,
        bare: bool = True,
        tools: tuple[str, ...] | list[str] = (),
        max_tokens: int = 256,
        max_turns: int = 30,
        thinking: bool = False,
        timeout_s: float = 900.0,
    ):
        if bare and tools:
            raise ValueError(
                f"agent claude_code: tools={list(tools)} with bare=true; --bare offers {', '.join(BARE_TOOLS)}: set bare=false"
            )
        unknown = sorted(set(tools) - set(KNOWN_TOOLS))
        if unknown:
            raise ValueError(f"agent claude_code: unknown tools {unknown} (Claude Code's: {', '.join(KNOWN_TOOLS)})")
        for name, value in (("max_tokens", max_tokens), ("max_turns", max_turns)):
            if value < 1:
                raise ValueError(f"agent claude_code: {name}={value} must be >= 1")
        self.bare, self.tools, self.max_tokens, self.max_turns = bare, tuple(tools), max_tokens, max_turns
        self.thinking, self.timeout_s = thinking, timeout_s
        self.binary = program_binary("claude_code", "claude", "npm install -g @anthropic-ai/claude-code")
        self.version = program_version("claude_code", self.binary, OFF)

    def offered_tools(self) -> tuple[str, ...]:
        return BARE_TOOLS if self.bare else self.tools

    def run(self, task: AgentTask, endpoint: Endpoint) -> AgentResult:
        check_memory_floor("claude_code", task, MIN_MEMORY_MB, "Claude Code's runtime aborts under ~800 MiB")
        env = {
            **OFF,
            "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(self.max_tokens),
            "LOONGSAGE_CLAUDE": self.binary,
            "LOONGSAGE_CLAUDE_SETTINGS": json.dumps(self.settings(endpoint.model)),
            "LOONGSAGE_CLAUDE_SIDE_MODELS": " ".join(SIDE_MODELS),
            "LOONGSAGE_CLAUDE_MAX_TURNS": str(self.max_turns),
            "LOONGSAGE_CLAUDE_BARE": "1" if self.bare else "",
            "LOONGSAGE_CLAUDE_TOOLS": ",".join(self.tools),
            "LOONGSAGE_CLAUDE_SYSTEM_PROMPT": task.system_prompt or "",
        }
        if not self.thinking:
            env["CLAUDE_CODE_DISABLE_THINKING"] = "1"
        command = ("bash", "-c", EPISODE, "claude-code-episode", "{prompt}", "{base_url}", "{api_key}", "{model}")
        agent = BlackBoxAgent(command=command, env=env, in_sandbox=True, timeout_s=self.timeout_s)
        return agent.run(task, endpoint)

    def settings(self, model: str) -> dict:
        """Claude Code's settings.json for one episode: the model and its tools' permissions."""
        return {"model": model, "permissions": {"allow": list(self.offered_tools()), "defaultMode": "acceptEdits"}}

    def demonstration(self, task: AgentTask, calls: list[dict], model: str) -> dict:
        """The chat request an episode ends with when the model makes `calls` (str_replace and
        submit, as SWE tasks give them), recorded through Claude Code itself in the task's sandbox."""
        if task.sandbox is None:
            raise ValueError(f"agent claude_code: demonstration {task.instance_id!r} needs the task's sandbox")
        missing = sorted({"Read", "Edit"} - set(self.offered_tools()))
        if missing:
            raise ValueError(f"agent claude_code: a demonstration edits through Read and Edit; {missing} not offered")
        replies = [*(reply(tool_calls=[c]) for c in claude_code_calls(calls, task.sandbox.workdir)), reply(CLOSING_REPLY)]
        return record_demonstration("claude_code", self.run, task, replies, model)


def claude_code_calls(calls: list[dict], workdir: str) -> list[ToolCall]:
    """Claude Code's tool calls for a task's gold calls: `Read` before the first `Edit` of a
    file, `Edit` per str_replace."""
    steps = read_then_edit_calls(
        "claude_code",
        calls,
        workdir,
        read=lambda path: {"Read": {"file_path": path}},
        edit=lambda path, old, new: {"Edit": {"file_path": path, "old_string": old, "new_string": new}},
    )
    return [ToolCall(f"toolu_demo_{i}", name, json.dumps(args)) for i, (name, args) in enumerate(steps)]
