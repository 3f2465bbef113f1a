"""`python -m loongsage.bench chaos` at its smallest (5 steps): every fault of its schedule is
injected for real and survived, no item is lost or trained twice, and what the engine's and the
trainer's restarts gave back is the published weights (the trainer's log-probs match the
engine's at every kept step)."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.integration.launch.launch_support import scalars

FAULTS = ("engine", "trainer", "controller", "reward", "sandbox")


def test_every_fault_is_survived_with_no_item_lost(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "loongsage.bench", "chaos", "--steps", "5", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rows = dict(re.findall(r"^\s*(\w+)\s+.+?\s+(\d+)\s+True$", result.stdout, re.M))
    assert sorted(rows) == sorted(FAULTS), result.stdout
    assert all(int(count) >= 1 for count in rows.values()), result.stdout
    assert "lost: 0; trained twice: 0" in result.stdout
    said = (tmp_path / "faulty" / "launch.log").read_text()
    assert "restart 1 of run.max_restarts=3" in said and "answers again after" in said
    assert "ended" in said and "process(es) that an earlier run of this run dir left running" in said
    logged = scalars(tmp_path / "faulty")
    assert max(logged["faults/engine_restarts"].values()) == 1.0
    assert max(logged["faults/trainer_restarts"].values()) == 1.0
    assert max(logged["train/mismatch_k3_kl"].values()) < 1e-6
    assert sorted(logged["rollout/reward_mean"]) == [1, 2, 3, 4, 5]
