"""The faults `bench chaos` injects from inside a run: a reward that hangs and a sandboxed command
that hangs, on the items its plan names. The plan comes in the environment (LOONGSAGE_CHAOS, JSON:
{"dir": ..., "hang_s": ..., "reward_hangs": [item ids], "sandbox_hangs": [item ids]}); each
fault injected leaves a file in "dir" so the bench can count them. Without a plan it is the SWE
reward, unchanged: the clean run of the bench uses it too, so both runs have the same config."""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

from loongsage.agentflow.sandbox import SandboxLimits, create_sandbox
from loongsage.tasks.swe.reward import episode_reward

PLAN_ENV = "LOONGSAGE_CHAOS"
SANDBOX_HANG_LIMIT_S = 2.0  # the hung command's time limit: the sandbox kills it then


def chaos_swe_reward(item: dict[str, Any], result: Any) -> tuple[float, dict[str, Any]]:
    plan = json.loads(os.environ.get(PLAN_ENV, "{}"))
    if item["id"] in plan.get("sandbox_hangs", []):
        with create_sandbox({}, limits=SandboxLimits(timeout_s=SANDBOX_HANG_LIMIT_S)) as sandbox:
            done = sandbox.exec("sleep 3600")
        _leave_mark(plan, "sandbox_hang_killed" if done.timed_out else "sandbox_hang_not_killed", item)
    if item["id"] in plan.get("reward_hangs", []):
        _leave_mark(plan, "reward_hang", item)
        time.sleep(plan["hang_s"])  # past data.reward_timeout_s: the run must give up on it
    return episode_reward(item, result)


def _leave_mark(plan: dict, fault: str, item: dict) -> None:
    folder = Path(plan["dir"])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{fault}.{item['id']}.{uuid.uuid4().hex[:8]}").write_text(str(time.time()))
