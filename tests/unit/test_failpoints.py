"""A failpoint kills its process with SIGKILL at the named point, step and rank, once: the
process that replaces it goes past; without the variable, or elsewhere, nothing happens."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from loongsage.failpoints import KILL_AT_ENV

REACH = """
import sys
from loongsage.failpoints import die_here_if_asked, dying_after_first
point, step, rank = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
if point == "push_weights":
    for name in dying_after_first(["a", "b"], point, step, rank):
        print(name, flush=True)
else:
    die_here_if_asked(point, step, rank)
print("went past", flush=True)
"""


def reach(tmp_path, point: str, step: int, rank: int, plan: dict | None) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key != KILL_AT_ENV}
    if plan is not None:
        env[KILL_AT_ENV] = json.dumps({"marks": str(tmp_path / "marks"), "kills": plan})
    command = [sys.executable, "-c", REACH, point, str(step), str(rank)]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)


def test_the_named_point_kills_once_and_the_replacement_goes_past(tmp_path):
    plan = [{"point": "train_step", "step": 2, "rank": 1}]
    first = reach(tmp_path, "train_step", 2, 1, plan)
    assert first.returncode == -signal.SIGKILL and "went past" not in first.stdout
    assert [path.name for path in (tmp_path / "marks").iterdir()] == ["train_step.step2.rank1"]
    assert reach(tmp_path, "train_step", 2, 1, plan).stdout == "went past\n"


def test_a_push_dies_after_its_first_tensor(tmp_path):
    died = reach(tmp_path, "push_weights", 3, 0, [{"point": "push_weights", "step": 3, "rank": 0}])
    assert died.returncode == -signal.SIGKILL and died.stdout == "a\n"


def test_another_step_rank_or_point_and_no_plan_go_past(tmp_path):
    plan = [{"point": "train_step", "step": 2, "rank": 1}]
    for point, step, rank in [("train_step", 3, 1), ("train_step", 2, 0), ("push_weights", 2, 1)]:
        assert reach(tmp_path, point, step, rank, plan).stdout.endswith("went past\n")
    assert reach(tmp_path, "train_step", 2, 1, None).stdout == "went past\n"
    assert not (tmp_path / "marks").exists()


def test_a_malformed_plan_or_an_unknown_point_is_refused_naming_the_variable(tmp_path):
    typo = reach(tmp_path, "train_step", 2, 1, [{"point": "train-step", "step": 2, "rank": 1}])
    assert typo.returncode == 1 and "LOONGSAGE_KILL_AT=" in typo.stderr and "point 'train-step' is none of" in typo.stderr
    env = {**os.environ, KILL_AT_ENV: "{not json"}
    broken = subprocess.run([sys.executable, "-c", REACH, "train_step", "2", "1"], env=env, capture_output=True, text=True)
    assert broken.returncode == 1 and "LOONGSAGE_KILL_AT='{not json': JSONDecodeError" in broken.stderr
