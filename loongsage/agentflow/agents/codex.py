"""Codex CLI (npm `@openai/codex`), run unmodified as a black-box agent inside the episode's sandbox.

Codex runs its tools itself, so it runs in the sandbox (`BlackBoxAgent` with `in_sandbox`),
reaching the router through the bridge when the sandbox has no network. It is set only through
its own configuration (a config.toml in a fresh CODEX_HOME, checked by its `--strict-config`, and
its environment): nothing of it is patched. What the preset sets, and why (measured on 0.171.0;
docs/agent_fields.md says what the router does with what Codex sends):

- one model provider, `loongsage`, on the episode's base URL (Codex POSTs {base_url}/responses,
  streamed; `wire_api = "chat"` is no longer accepted by Codex) with the key from an environment
  variable, and no retries: the router's errors are final, and Codex retries a 5xx 30 times;
- the served model by name. Codex knows no such model ("Defaulting to fallback metadata"): it
  then offers no apply_patch tool, so its shell (`exec_command`, with `write_stdin`) is how it
  reads and edits;
- every tool and side call it would make beyond that off: the hosted `web_search` tool
  (`web_search = "disabled"`), the sub-agent `namespace` group (`[agents] enabled = false`),
  request_user_input, view_image, goals, image generation, memories, apps and plugins (whose
  start-up sync reaches github.com and chatgpt.com), analytics and OpenTelemetry exporters
  (ab.chatgpt.com), feedback, the update check, skills and their instructions, the login-shell
  snapshot and login shells for commands (a login shell sources the sandbox's profile);
- its base instructions (~17,000 characters, a third of SmolLM2's context in tokens) replaced by
  `data.system_prompt` or a short prompt (`model_instructions_file`); Codex still adds its
  permissions block and the environment context (working directory, shell, date);
- no approvals and no sandbox of its own (`approval_policy = "never"`, `sandbox_mode =
  "danger-full-access"`): the episode's sandbox is the boundary, and Codex's own bwrap cannot
  nest inside it; reasoning summaries off (nothing to summarize);
- a fresh CODEX_HOME per episode (its state databases, sessions off with `--ephemeral`), outside
  TMPDIR as Codex wants, and `--skip-git-repo-check` (a task tree need not be a git repository).

Codex sends no max_output_tokens, temperature or top_p: the run's rollout.* apply (the router).
The episode ends when Codex does: after a reply with no tool call, when a request fails, or
after a reply cut at rollout.max_new_tokens, which Codex takes as an error ("Incomplete response
returned, reason: max_output_tokens", exit code 1): give replies room.

Demonstrations (warm start) go through Codex too (`replay.py`): each of a task's gold edits is
one `exec_command` that rewrites the file in Python, then a closing reply.
"""

from __future__ import annotations

import json

from loongsage.agentflow.agents.base import AgentResult, AgentTask, Endpoint
from loongsage.agentflow.agents.blackbox import BlackBoxAgent
from loongsage.agentflow.agents.programs import check_memory_floor, program_binary, program_version
from loongsage.agentflow.agents.replay import edit_commands, record_demonstration, reply
from loongsage.agentflow.router.messages import ToolCall

PROVIDER = "loongsage"
API_KEY_VARIABLE = "LOONGSAGE_API_KEY"
CLOSING_REPLY = "I fixed the bug."  # a demonstration's last reply: no tool call, so Codex stops
DEFAULT_PROMPT = (
    "You are a coding agent working in a repository. Run shell commands with exec_command to read, "
    "edit and test the code until the task is solved. When finished, reply with a short summary."
)
# RLIMIT_AS: Codex (its node launcher and native binary) fails to start at 704 MiB and runs at
# 768 (measured on 0.171.0); its shell commands need some more.
MIN_MEMORY_MB = 1024
MEMORY_FLOOR_MEASURED = "Codex does not start under ~768 MiB"
FEATURES_OFF = (
    "plugins",
    "remote_plugin",
    "apps",
    "goals",
    "memories",
    "image_generation",
    "tool_suggest",
    "skill_mcp_dependency_install",
    "shell_snapshot",
    "view_image",
)
# What the episode script fills into the config: where the sandbox reaches the router, and the
# fresh CODEX_HOME.
BASE_URL, HOME = "@BASE_URL@", "@CODEX_HOME@"
# One episode: a fresh CODEX_HOME with the config, then `codex exec`. $1 prompt, $2 base URL. No
# braces: the agent's command arguments are templates.
EPISODE = """set -e
state=$(mktemp -d)
trap 'rm -rf "$state"' EXIT
mkdir -p "$state/home" "$state/tmp"
printf '%s' "$LOONGSAGE_CODEX_CONFIG" | sed -e "s#@BASE_URL@#$2#" -e "s#@CODEX_HOME@#$state/home#" > "$state/home/config.toml"
printf '%s' "$LOONGSAGE_CODEX_INSTRUCTIONS" > "$state/home/instructions.md"
export CODEX_HOME="$state/home" TMPDIR="$state/tmp"
"$LOONGSAGE_CODEX" exec --skip-git-repo-check --strict-config --ephemeral "$1" < /dev/null
"""


class CodexAgent:
    """`agent.name=codex`. `timeout_s`: the whole episode."""

    def __init__(self, timeout_s: float = 900.0):
        self.timeout_s = timeout_s
        self.binary = program_binary("codex", "codex", "npm install -g @openai/codex")
        self.version = program_version("codex", self.binary, {})

    def run(self, task: AgentTask, endpoint: Endpoint) -> AgentResult:
        check_memory_floor("codex", task, MIN_MEMORY_MB, MEMORY_FLOOR_MEASURED)
        env = {
            "LOONGSAGE_CODEX": self.binary,
            "LOONGSAGE_CODEX_CONFIG": self.config(endpoint.model),
            "LOONGSAGE_CODEX_INSTRUCTIONS": task.system_prompt or DEFAULT_PROMPT,
            API_KEY_VARIABLE: endpoint.api_key,
        }
        command = ("bash", "-c", EPISODE, "codex-episode", "{prompt}", "{base_url}")
        agent = BlackBoxAgent(command=command, env=env, in_sandbox=True, timeout_s=self.timeout_s)
        return agent.run(task, endpoint)

    def config(self, model: str) -> str:
        """Codex's config.toml for one episode, the router's URL and CODEX_HOME left as BASE_URL
        and HOME for the episode script to fill in."""
        features = "\n".join(f"{name} = false" for name in FEATURES_OFF)
        return f"""model = {json.dumps(model)}
model_provider = "{PROVIDER}"
model_instructions_file = "{HOME}/instructions.md"
approval_policy = "never"
sandbox_mode = "danger-full-access"
allow_login_shell = false
check_for_update_on_startup = false
web_search = "disabled"
model_reasoning_summary = "none"
hide_agent_reasoning = true
suppress_unstable_features_warning = true

[agents]
enabled = false

[analytics]
enabled = false

[feedback]
enabled = false

[otel]
exporter = "none"
metrics_exporter = "none"
trace_exporter = "none"

[history]
persistence = "none"

[tools.experimental_request_user_input]
enabled = false

[skills]
include_instructions = false

[skills.bundled]
enabled = false

[features]
{features}

[model_providers.{PROVIDER}]
name = "LoongSage router"
base_url = "{BASE_URL}"
env_key = "{API_KEY_VARIABLE}"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0
"""

    def demonstration(self, task: AgentTask, calls: list[dict], model: str) -> dict:
        """The chat request an episode ends with when the model makes `calls` (str_replace and
        submit, as SWE tasks give them), recorded through Codex itself in the task's sandbox."""
        if task.sandbox is None:
            raise ValueError(f"agent codex: demonstration {task.instance_id!r} needs the task's sandbox")
        replies = [*(reply(tool_calls=[c]) for c in codex_calls(calls)), reply(CLOSING_REPLY)]
        return record_demonstration("codex", self.run, task, replies, model)


def codex_calls(calls: list[dict]) -> list[ToolCall]:
    """Codex's tool calls for a task's gold calls: one exec_command per str_replace."""
    commands = edit_commands("codex", calls)
    return [ToolCall(f"call_demo_{i}", "exec_command", json.dumps({"cmd": c})) for i, c in enumerate(commands)]
