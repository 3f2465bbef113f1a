"""mini-swe-agent (PyPI `mini-swe-agent`), run unmodified as a black-box agent.

It runs as its own process beside the task's sandbox and reaches the model through the
router's per-trajectory URL (litellm's `openai/` provider). Its bash actions run inside the
task's sandbox: mini-swe-agent takes an environment class by import path, and
`SandboxEnvironment` below is that class, attached to the sandbox the framework created.

Demonstrations (warm start) go through mini-swe-agent too (`replay.py`): a task's gold calls
become its own bash tool calls, each str_replace a short Python edit of the file and `submit`
its submitting command, run for real against a scripted endpoint; the conversation it sent is
what the warm start trains on.
"""

from __future__ import annotations

import json
import platform
import shutil
import sys
from pathlib import Path
from typing import Any

from loongsage.agentflow.agents.base import AgentResult, AgentTask, Endpoint
from loongsage.agentflow.agents.blackbox import BlackBoxAgent
from loongsage.agentflow.agents.replay import edit_commands, record_demonstration, reply
from loongsage.agentflow.router.messages import ToolCall
from loongsage.agentflow.sandbox import attach_sandbox

# mini-swe-agent's own sentinel: the first output line of the submitting command.
SUBMIT_SENTINEL = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
# A str_replace as one bash command: the strings as Python literals (repr: single quotes unless
# the text has one, so the tool call's JSON needs few escapes), and no shell quoting or regex
# escaping stands between the model and the exact text.


class MiniSweAgent:
    """`agent.name=mini_swe_agent`: the `mini` CLI, run non-interactively against the
    trajectory's URL. `extra_config`: more of mini-swe-agent's own `--config key=value` specs,
    passed as written (braces too: its templates are Jinja, e.g. `agent.instance_template=...{{task}}`).

    data.system_prompt is not passed: mini-swe-agent's system prompt is a Jinja template in its
    own `config` (agent.system_template), written for its bash-tool protocol, and replacing it
    with plain text would break that protocol; set it there. Sampling: `max_tokens` is an
    override; unset, the router applies rollout.max_new_tokens (and rollout.temperature, ...)."""

    def __init__(
        self,
        step_limit: int = 10,
        max_tokens: int | None = None,
        config: str = "mini.yaml",
        timeout_s: float = 900.0,
        command_timeout_s: int = 60,
        extra_config: tuple[str, ...] | list[str] = (),
    ):
        specs = [*((f"model.model_kwargs.max_tokens={max_tokens}",) if max_tokens is not None else ()), *extra_config]
        # Beside this interpreter first: a venv's scripts are often not on PATH.
        mini = shutil.which("mini", path=str(Path(sys.executable).parent)) or shutil.which("mini")
        if mini is None:
            raise ValueError("agent mini_swe_agent: the `mini` command is missing; pip install mini-swe-agent")
        command = [
            mini,
            "--yolo",
            "--exit-immediately",
            "--model",
            "openai/{model}",
            "--task",
            "{prompt}",
            "--config",
            config,
            "--config",
            "model.model_kwargs.api_base={base_url}",
            "--config",
            "model.model_kwargs.api_key={api_key}",
            "--config",
            "model.cost_tracking=ignore_errors",
            "--config",
            f"agent.step_limit={step_limit}",
            "--config",
            "agent.cost_limit=0",
            "--environment-class",
            f"{__name__}.SandboxEnvironment",
            "--config",
            "environment.sandbox={sandbox}",
            "--config",
            f"environment.timeout={command_timeout_s}",
            # The command's arguments are templates of our placeholders; mini's own specs are literal.
            *[part for spec in specs for part in ("--config", spec.replace("{", "{{").replace("}", "}}"))],
            "--output",
            "{scratch}/trajectory.json",
        ]
        # MSWEA_CONFIGURED skips its first-run setup prompt; no colour codes in our logs.
        env = {"MSWEA_CONFIGURED": "true", "NO_COLOR": "1", "LITELLM_LOG": "ERROR"}
        self.program = BlackBoxAgent(command=tuple(command), timeout_s=timeout_s, env=env)

    def run(self, task: AgentTask, endpoint: Endpoint) -> AgentResult:
        return self.program.run(task, endpoint)

    def demonstration(self, task: AgentTask, calls: list[dict], model: str) -> dict:
        """The chat request an episode ends with when the model makes `calls` (str_replace and
        submit, as SWE tasks give them), recorded through mini-swe-agent itself in the task's sandbox."""
        if task.sandbox is None:
            raise ValueError(f"agent mini_swe_agent: demonstration {task.instance_id!r} needs the task's sandbox")
        replies = [reply(tool_calls=[command]) for command in mini_calls(calls)]
        return record_demonstration("mini_swe_agent", self.run, task, replies, model)


def mini_calls(calls: list[dict]) -> list[ToolCall]:
    """mini-swe-agent's bash calls for a task's gold calls: an edit command per str_replace, then
    its submitting command (a demonstration always ends by submitting)."""
    commands = [*edit_commands("mini_swe_agent", calls), f"echo {SUBMIT_SENTINEL}"]
    return [ToolCall(f"call_demo_{i}", "bash", json.dumps({"command": c})) for i, c in enumerate(commands)]


class SandboxEnvironment:
    """mini-swe-agent's Environment protocol (`execute`, `get_template_vars`, `serialize`) over
    a LoongSage sandbox. Constructed by mini-swe-agent from its config: `sandbox` is the JSON
    handle the framework passed on the command line."""

    def __init__(self, *, sandbox: dict, timeout: int = 60, env: dict[str, str] | None = None, cwd: str = "", **_: Any):
        self.sandbox = attach_sandbox(sandbox)
        self.timeout = timeout
        self.env = dict(env or {})
        self.cwd = cwd or None

    def execute(self, action: dict, cwd: str = "", *, timeout: int | None = None) -> dict[str, Any]:
        command = action.get("command", "")
        result = self.sandbox.exec(command, timeout_s=timeout or self.timeout, cwd=cwd or self.cwd, env=self.env)
        output = {
            "output": result.stdout + result.stderr,
            "returncode": result.exit_code if result.exit_code is not None else -1,
            "exception_info": "",
        }
        if result.timed_out:
            output["exception_info"] = f"the command timed out after {timeout or self.timeout} s and was killed"
        self._raise_if_submitted(output)
        return output

    def _raise_if_submitted(self, output: dict) -> None:
        lines = output["output"].lstrip().splitlines(keepends=True)
        if lines and lines[0].strip() == SUBMIT_SENTINEL and output["returncode"] == 0:
            from minisweagent.exceptions import Submitted  # only ever runs inside mini-swe-agent

            submission = "".join(lines[1:])
            raise Submitted(
                {"role": "exit", "content": submission, "extra": {"exit_status": "Submitted", "submission": submission}}
            )

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        return {**platform.uname()._asdict(), "cwd": self.sandbox.workdir, "timeout": self.timeout, **kwargs}

    def serialize(self) -> dict:
        return {
            "info": {
                "config": {
                    "environment": {"backend": self.sandbox.backend, "timeout": self.timeout},
                    "environment_type": f"{__name__}.{type(self).__name__}",
                }
            }
        }
