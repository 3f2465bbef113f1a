"""Black-box agents: any program that takes an OpenAI-compatible base URL and key.

The program runs unmodified, as a subprocess beside the task's workspace (its working
directory is the workspace tree) or, with `in_sandbox`, inside the episode's sandbox: a program
that runs its own tools (OpenCode edits files and runs bash itself) must, or its commands would
run on the host. It only learns where the model is through its command line and the usual
environment variables; in a sandbox without network it reaches the router, and nothing else,
through `router_bridge`. The router behind the URL attributes and records every call, so
nothing of the program's own bookkeeping is needed for training.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from loongsage.agentflow.agents import router_bridge
from loongsage.agentflow.agents.base import AgentResult, AgentTask, Endpoint
from loongsage.agentflow.agents.tools import truncate_middle
from loongsage.agentflow.sandbox import Sandbox

PLACEHOLDERS = (
    "base_url",
    "api_key",
    "model",
    "workdir",
    "prompt",
    "prompt_file",
    "instance_id",
    "sandbox",
    "scratch",
    "system_prompt",
)
# Host paths: nothing inside a sandbox can open them.
HOST_ONLY_PLACEHOLDERS = ("prompt_file", "sandbox", "scratch")


@dataclass(frozen=True)
class BlackBoxConfig:
    # argv with {placeholders}: base_url, api_key, model, workdir (the tree's host path), prompt,
    # prompt_file, instance_id, sandbox (JSON handle for `attach_sandbox`), scratch (a private temp dir),
    # system_prompt (data.system_prompt; "" when unset), for a program that accepts one. Sampling
    # settings are not passed: the router applies the run's rollout.* to whatever the program leaves unset.
    # In the sandbox, {workdir} is the tree as the sandbox sees it and {base_url} the router as it
    # reaches it; the host-only placeholders are refused.
    command: tuple[str, ...] = ()
    timeout_s: float = 600.0
    env: dict[str, str] = field(default_factory=dict)
    max_log_chars: int = 4000
    in_sandbox: bool = False  # run the program inside the episode's sandbox (its limits apply to it)


class BlackBoxAgent:
    def __init__(self, config: BlackBoxConfig | None = None, **overrides):
        base = config or BlackBoxConfig()
        fields = {**base.__dict__, **overrides}
        fields["command"] = tuple(fields["command"])
        self.config = BlackBoxConfig(**fields)
        if not self.config.command:
            raise ValueError("agent.command: a black-box agent needs the program to run (a list of arguments)")
        if self.config.in_sandbox:
            for arg in self.config.command:
                used = [p for p in HOST_ONLY_PLACEHOLDERS if "{" + p + "}" in arg]
                if used:
                    raise ValueError(f"agent.command argument {arg!r}: {{{used[0]}}} is a host path, not seen in_sandbox")

    def run(self, task: AgentTask, endpoint: Endpoint) -> AgentResult:
        if self.config.in_sandbox:
            return self._run_in_sandbox(task, endpoint)
        with tempfile.TemporaryDirectory(prefix="loongsage-agent-") as scratch:
            prompt_file = Path(scratch) / "task.md"
            prompt_file.write_text(task.prompt)
            values = {
                "base_url": endpoint.base_url,
                "api_key": endpoint.api_key,
                "model": endpoint.model,
                "workdir": str(task.sandbox.root) if task.sandbox is not None else scratch,
                "prompt": task.prompt,
                "prompt_file": str(prompt_file),
                "instance_id": task.instance_id,
                "sandbox": json.dumps(task.sandbox.handle()) if task.sandbox is not None else "null",
                "scratch": scratch,
                "system_prompt": task.system_prompt or "",
            }
            argv = [_fill(arg, values) for arg in self.config.command]
            env = {
                **os.environ,
                **self.config.env,
                "OPENAI_BASE_URL": endpoint.base_url,
                "OPENAI_API_KEY": endpoint.api_key,
                "OPENAI_API_BASE": endpoint.base_url,
                "LOONGSAGE_MODEL": endpoint.model,
                "HOME": scratch,
            }
            result = self._run(argv, values["workdir"], env)
        if task.sandbox is not None:
            result.patch = task.sandbox.diff()
        return result

    def _run_in_sandbox(self, task: AgentTask, endpoint: Endpoint) -> AgentResult:
        sandbox = task.sandbox
        if sandbox is None:
            raise ValueError(f"agent in_sandbox: task {task.instance_id!r} has no sandbox to run in")
        bridged = sandbox.denies_network
        base_url = router_bridge.base_url_inside(endpoint.base_url) if bridged else endpoint.base_url
        values = {
            "base_url": base_url,
            "api_key": endpoint.api_key,
            "model": endpoint.model,
            "workdir": sandbox.workdir,
            "prompt": task.prompt,
            "instance_id": task.instance_id,
            "system_prompt": task.system_prompt or "",
        }
        env = {
            **self.config.env,
            "OPENAI_BASE_URL": base_url,
            "OPENAI_API_KEY": endpoint.api_key,
            "OPENAI_API_BASE": base_url,
            "LOONGSAGE_MODEL": endpoint.model,
        }
        argv = [_fill(arg, values) for arg in self.config.command]
        bridge = None
        if bridged:
            bridge = router_bridge.HostEnd(sandbox.root, sandbox.workdir, _address(endpoint.base_url), owner=sandbox.uid)
            # Its own source, not `-m`: the framework's package need not be visible in the sandbox.
            source = Path(router_bridge.__file__).read_text()
            argv = [sys.executable, "-c", source, "--socket", bridge.socket_path_inside, "--", *argv]
        try:
            result = _exec_logged(sandbox, argv, env, self.config)
        finally:
            if bridge is not None:
                bridge.close()  # before the diff: the socket's directory is not the agent's work
        result.patch = sandbox.diff()
        return result

    def _run(self, argv: list[str], cwd: str, env: dict[str, str]) -> AgentResult:
        start = time.monotonic()
        try:
            process = subprocess.Popen(
                argv,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            return AgentResult(exit_status="error", error=f"cannot start {argv[0]!r}: {exc}")
        try:
            output, _ = process.communicate(timeout=self.config.timeout_s)
        except subprocess.TimeoutExpired:
            # The whole session: agents spawn shells and tools of their own.
            os.killpg(process.pid, signal.SIGKILL)
            output, _ = process.communicate()
            return AgentResult(
                exit_status="error",
                error=f"timed out after {self.config.timeout_s:.0f} s",
                log=[_tail(output, self.config.max_log_chars)],
            )
        finally:
            _kill_leftovers(process.pid)
        log = [_tail(output, self.config.max_log_chars), f"exit code {process.returncode} after {time.monotonic() - start:.1f} s"]
        if process.returncode != 0:
            return AgentResult(exit_status="error", error=f"exit code {process.returncode}", log=log)
        return AgentResult(exit_status="exited", log=log)


def _exec_logged(sandbox: Sandbox, argv: list[str], env: dict[str, str], config: BlackBoxConfig) -> AgentResult:
    done = sandbox.exec(argv, timeout_s=config.timeout_s, env=env)
    output = (done.stdout + done.stderr).encode()
    log = [_tail(output, config.max_log_chars), f"exit code {done.exit_code} after {done.duration_s:.1f} s"]
    if done.timed_out:
        return AgentResult(exit_status="error", error=f"timed out after {config.timeout_s:.0f} s", log=log)
    if done.exit_code != 0:
        return AgentResult(exit_status="error", error=f"exit code {done.exit_code}", log=log)
    return AgentResult(exit_status="exited", log=log)


def _address(base_url: str) -> tuple[str, int]:
    parts = urlsplit(base_url)
    return parts.hostname or "127.0.0.1", parts.port or (443 if parts.scheme == "https" else 80)


def _fill(arg: str, values: dict[str, str]) -> str:
    try:
        return arg.format(**values)
    except (KeyError, IndexError) as exc:
        known = ", ".join("{" + p + "}" for p in PLACEHOLDERS)
        raise ValueError(
            f"agent.command argument {arg!r}: unknown placeholder {exc} (known: {known}; write {{{{ }}}} for a literal brace)"
        ) from None


def _tail(output: bytes, limit: int) -> str:
    return truncate_middle(output.decode("utf-8", errors="replace"), limit)


def _kill_leftovers(session_id: int) -> None:
    try:
        os.killpg(session_id, signal.SIGKILL)
    except ProcessLookupError:
        pass
