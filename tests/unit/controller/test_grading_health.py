"""Grading that broke is told apart from wrong patches: marked on the samples, counted per
episode, shown on the progress line, and a batch where every grading broke stops the run."""

from __future__ import annotations

import pytest

from loongsage.config import LoggingConfig
from loongsage.controller.grading_health import GradingBroken, check_grading, grading_errors, mark_grading_error
from loongsage.controller.metrics import rollout_metrics
from loongsage.controller.monitor import Monitor
from loongsage.sample import Sample

BROKE = {
    "instance_id": "numutil__mean-divisor",
    "resolved": False,
    "tests": {},
    "error": True,
    "reason": "grading error: the local sandbox cannot run pytest (`python -c ...` exited 127): "
    "bash: line 1: python: command not found",
}
WRONG = {
    "instance_id": "numutil__mean-divisor",
    "resolved": False,
    "error": False,
    "reason": "FAIL_TO_PASS not passing: t::a (failed)",
    "tests": {"t::a": False},
}
EMPTY = {"instance_id": "numutil__mean-divisor", "resolved": False, "error": False, "reason": "empty patch", "tests": {}}


def episode(name: str, info: dict, branches: int = 1) -> list[Sample]:
    samples = []
    for _ in range(branches):
        sample = Sample(
            prompt_ids=[1],
            response_ids=[2, 3],
            label=info["instance_id"],
            metadata={
                "trajectory_id": name,
                "reward_info": info,
                "exit_status": "submitted",
                "episode_turns": 1,
                "episode_branches": branches,
                "hosted_tools_dropped": {},
            },
        )
        mark_grading_error(sample, info)
        samples.append(sample)
    return samples


def test_only_a_grading_that_broke_is_marked_and_counted_once_per_episode():
    samples = episode("a", BROKE, branches=2) + episode("b", WRONG) + episode("c", EMPTY)
    assert [s.metadata.get("grading_error") for s in samples] == [BROKE["reason"], BROKE["reason"], None, None]
    assert grading_errors(samples) == 1
    assert rollout_metrics(samples)["rollout/grading_errors"] == 1.0


def test_a_batch_where_every_grading_broke_stops_with_task_backend_output_and_fix():
    samples = episode("a", BROKE) + episode("b", BROKE) + episode("c", EMPTY)  # the empty patch was not graded
    with pytest.raises(GradingBroken) as caught:
        check_grading(samples, "auto", "step 3")
    message = str(caught.value)
    assert message.startswith("every grading of step 3 failed (2 of 3 episodes; the rest had no patch to grade)")
    assert "Task numutil__mean-divisor on sandbox backend 'auto': grading error: the local sandbox" in message
    assert "python: command not found" in message
    assert "apt-get install bubblewrap" in message and "agent.sandbox=NAME" in message


def test_a_batch_with_one_grading_that_ran_or_without_errors_goes_on():
    check_grading(episode("a", BROKE) + episode("b", WRONG), "local", "step 1")  # one patch was graded
    check_grading(episode("a", EMPTY) + episode("b", EMPTY), "local", "step 1")  # nothing to grade, nothing broke
    check_grading(episode("a", WRONG), "local", "step 1")


def test_the_progress_line_shows_grading_errors_only_when_there_are_some(tmp_path, capsys):
    monitor = Monitor(LoggingConfig(tensorboard=False, rollouts_per_step=1), tmp_path, total_steps=2, start_step=0)
    broken = episode("a", BROKE) + episode("b", EMPTY)
    monitor.log(1, rollout_metrics(broken), broken)
    graded = episode("c", WRONG)
    monitor.log(2, rollout_metrics(graded), graded)
    first, second = capsys.readouterr().err.splitlines()
    assert first.startswith("step 1/2 | reward 0.000 (grading errors 1) | len 2.0")
    assert second.startswith("step 2/2 | reward 0.000 | len 2.0")
    assert '"grading_error": "grading error: the local sandbox' in (tmp_path / "rollouts.jsonl").read_text()
