"""`python -m loongsage.bench staleness` at its smallest (the tiny model, 3 steps, one staleness,
one correction): the cell runs fully_async through launch.py and is printed with numbers read back
from its TensorBoard files, and the reward curves are drawn."""

from __future__ import annotations

import math
import re
import subprocess
import sys

TINY = [
    "rollout.prompts_per_step=4",
    "rollout.group_size=4",
    "rollout.max_new_tokens=16",
    "trainer.micro_batch_size=4",
    "trainer.lr=1e-3",
    "data.reward=tests.toy_rewards:e_fraction",
]


def test_a_cell_runs_and_is_printed_from_what_it_logged(tmp_path):
    argv = ["--model", "tiny", "--steps", "3", "--staleness", "2", "--corrections", "m2po", "--last", "2"]
    result = subprocess.run(
        [sys.executable, "-m", "loongsage.bench", "staleness", *argv, "--out", str(tmp_path), "--", *TINY],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    rows = re.findall(r"^\s+2\s+(none|m2po)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)$", result.stdout, re.M)
    assert [row[0] for row in rows] == ["m2po"], result.stdout
    for _, reward, mismatch, reached, taken_out in rows:
        assert 0.0 <= float(reward) <= 1.0 and math.isfinite(float(mismatch)) and float(mismatch) >= 0
        assert 0.0 <= float(reached) <= 2.0 and 0.0 <= float(taken_out) <= 1.0
    assert (tmp_path / "staleness.png").stat().st_size > 0
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["staleness2-m2po"]
