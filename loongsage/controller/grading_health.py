"""Telling a broken grader from a model that fixes nothing.

A reward of 0 because grading itself broke (no sandbox, no Python in it, the harness timing
out) says nothing about the patch. Such episodes carry `grading_error` in their samples'
metadata, are counted apart (`rollout/grading_errors`), and a batch in which gradings failed
and none ran to a verdict stops the run: it could only ever score 0.
"""

from __future__ import annotations

from loongsage.sample import Sample

_FIX = (
    "install bubblewrap (apt-get install bubblewrap), or choose a sandbox backend that runs the framework's "
    "Python with agent.sandbox=NAME (`python -m loongsage.tasks.swe check TASKS.jsonl --backend NAME` tries one)"
)


class GradingBroken(RuntimeError):
    """Every grading of a batch failed; the message names the task, backend, output and fix."""


def mark_grading_error(sample: Sample, reward_info: dict) -> None:
    """Record on the sample that its reward is 0 because grading broke (the reward said
    `error`), with the grader's reason."""
    if reward_info.get("error"):
        sample.metadata["grading_error"] = str(reward_info.get("reason", "grading failed"))


def grading_errors(samples: list[Sample]) -> int:
    """Episodes (not samples: one episode may export several) whose grading broke."""
    return len({_episode(index, s) for index, s in enumerate(samples) if "grading_error" in s.metadata})


def check_grading(samples: list[Sample], backend: str, batch: str) -> None:
    """Raise GradingBroken when gradings of `batch` failed and none ran the tests to a
    verdict (episodes without a patch to grade are neither)."""
    failed = [s for s in samples if "grading_error" in s.metadata]
    if not failed or any(_graded(s) for s in samples):
        return
    first = failed[0]
    task = first.metadata.get("reward_info", {}).get("instance_id") or first.label
    episodes = len({_episode(index, s) for index, s in enumerate(samples)})
    raise GradingBroken(
        f"every grading of {batch} failed ({grading_errors(samples)} of {episodes} episodes; the rest had no patch "
        f"to grade), so its rewards would be 0 whatever the model wrote: stopping rather than training on them. "
        f"Task {task} on sandbox backend {backend!r}: {first.metadata['grading_error']}. Fix: {_FIX}."
    )


def _graded(sample: Sample) -> bool:
    """Whether the sample's grading ran the task's tests to a verdict."""
    info = sample.metadata.get("reward_info", {})
    return "grading_error" not in sample.metadata and bool(info.get("tests"))


def _episode(index: int, sample: Sample) -> object:
    return sample.metadata.get("trajectory_id", index)
