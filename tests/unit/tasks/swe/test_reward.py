from __future__ import annotations

import logging

from loongsage.tasks.swe import reward
from loongsage.tasks.swe.instance import SweTask
from loongsage.tasks.swe.reward import SweRewardFn, score_patch, swe_reward

TASK = SweTask(
    instance_id="demo",
    problem_statement="add() subtracts",
    files={"calc.py": "def add(a, b):\n    return a - b\n", "tests/test_calc.py": "..."},
    fail_to_pass=["tests/test_calc.py::test_add"],
    pass_to_pass=[],
    gold_patch="",
)
TAMPERING = "--- a/tests/test_calc.py\n+++ b/tests/test_calc.py\n@@ -1 +1 @@\n-...\n+pass\n"


def test_empty_and_tampering_patches_score_zero_without_running_anything():
    assert swe_reward(TASK, "") == 0.0
    value, metadata = score_patch(TASK, TAMPERING)
    assert value == 0.0
    assert metadata == {
        "instance_id": "demo",
        "resolved": False,
        "error": False,
        "tests": {},
        "reason": "patch touches tests or test configuration: tests/test_calc.py",
    }


def test_task_without_files_is_a_grading_error_not_an_exception(caplog):
    cluster_task = SweTask("remote", "p", {}, ["t::a"], [], "", repo="o/r", base_commit="abc")
    with caplog.at_level(logging.WARNING, logger="loongsage.tasks.swe.reward"):
        value, metadata = score_patch(cluster_task, "diff --git a/x b/x\n")
    assert value == 0.0 and metadata["error"] is True
    assert "container image" in metadata["reason"]
    assert "remote" in caplog.text


def test_a_crash_inside_grading_scores_zero(monkeypatch, caplog):
    def broken_grade(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(reward, "grade", broken_grade)
    with caplog.at_level(logging.WARNING, logger="loongsage.tasks.swe.reward"):
        value, metadata = score_patch(TASK, "some patch")
    assert value == 0.0
    assert metadata["error"] is True and metadata["reason"] == "grading failed: RuntimeError: disk full"
    assert "disk full" in caplog.text


def test_reward_fn_takes_the_patch_and_the_instance_id(caplog):
    reward_fn = SweRewardFn([TASK])
    assert reward_fn("", "demo") == 0.0
    with caplog.at_level(logging.WARNING, logger="loongsage.tasks.swe.reward"):
        assert reward_fn("a patch", "no-such-task") == 0.0
    assert "no task with instance_id 'no-such-task'" in caplog.text
