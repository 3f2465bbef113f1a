"""Export of trajectories: loss masks, logprobs and versions per turn and concatenated."""

from __future__ import annotations

import json

import numpy as np
import pytest

from loongsage.agentflow.router.export import is_concatenable, to_samples, trajectory_json
from loongsage.agentflow.router.messages import Message
from loongsage.agentflow.router.trajectory import Branch, Trajectory, Turn


def _turn(prompt: list[int], output: list[int], version: int, finish: str = "stop") -> Turn:
    return Turn(
        prompt_ids=prompt,
        output_ids=output,
        output_logprobs=[-0.1 * t for t in output],
        weight_versions=[version] * len(output),
        finish_reason=finish,
        sampled_text=f"<{len(output)}>",
        stop_text="",
        message=Message("assistant", "x"),
        prompt_text="",
    )


def _three_turn_trajectory() -> Trajectory:
    """prompt [1 2 3] -> sampled [10 11]; tool tokens [4 5] -> sampled [12]; user [6] -> sampled [13 14]."""
    trajectory = Trajectory("t")
    branch = Branch(
        0,
        "0",
        "first request of attempt 0",
        [
            _turn([1, 2, 3], [10, 11], 5),
            _turn([1, 2, 3, 10, 11, 4, 5], [12], 6),
            _turn([1, 2, 3, 10, 11, 4, 5, 12, 6], [13, 14], 6, finish="length"),
        ],
    )
    trajectory.branches.append(branch)
    return trajectory


def test_concatenated_sample_masks_exactly_the_sampled_tokens():
    (sample,) = to_samples(_three_turn_trajectory(), "concat")
    assert sample.prompt_ids == [1, 2, 3]
    assert sample.response_ids == [10, 11, 4, 5, 12, 6, 13, 14]
    assert sample.loss_mask == [1, 1, 0, 0, 1, 0, 1, 1]
    assert sample.response_logprobs == pytest.approx([-1.0, -1.1, 0.0, 0.0, -1.2, 0.0, -1.3, -1.4])
    # Inserted tokens carry the version of the sampled token before them.
    assert sample.weight_versions == [5, 5, 5, 5, 6, 6, 6, 6]
    assert sample.finish_reason == "length"
    assert sample.metadata == {"trajectory_id": "t", "attempt": "0", "branch": 0, "turns": [0, 1, 2]}
    assert len(sample.response_ids) == len(sample.loss_mask) == len(sample.response_logprobs) == len(sample.weight_versions)


def test_routing_keeps_each_turns_sampled_tokens_and_the_last_calls_elsewhere():
    """Turn t's routing rows are filled with 100 * (t + 1) + position: which call a row came
    from and for which position shows in the concatenated sample's routing."""
    trajectory = _three_turn_trajectory()
    turns = trajectory.branches[0].turns
    for t, turn in enumerate(turns):
        rows = len(turn.prompt_ids) + len(turn.output_ids) - 1
        turn.routed_experts = (100 * (t + 1) + np.arange(rows, dtype=np.int32))[:, None].repeat(4, axis=1)
    (sample,) = to_samples(trajectory, "concat")
    # Sequence 1 2 3 10 11 4 5 12 6 13 14. Of the sampled tokens, only 10 (position 3) was forwarded
    # by the call that sampled it (11 and 12 each ended their turn); every other row is the last call's.
    origin = (sample.routed_experts[:, 0] // 100).tolist()
    assert sample.routed_experts.shape == (sample.num_tokens - 1, 4)
    assert origin == [3, 3, 3, 1, 3, 3, 3, 3, 3, 3]
    assert (sample.routed_experts[:, 0] % 100).tolist() == list(range(10))
    assert [s.routed_experts.shape[0] for s in to_samples(trajectory, "per_turn")] == [4, 7, 10]
    turns[1].routed_experts = None
    assert to_samples(trajectory, "concat")[0].routed_experts is None


def test_per_turn_samples_are_each_engine_call():
    samples = to_samples(_three_turn_trajectory(), "per_turn")
    assert [s.prompt_ids for s in samples] == [[1, 2, 3], [1, 2, 3, 10, 11, 4, 5], [1, 2, 3, 10, 11, 4, 5, 12, 6]]
    assert [s.response_ids for s in samples] == [[10, 11], [12], [13, 14]]
    assert all(s.loss_mask == [1] * len(s.response_ids) for s in samples)
    assert [s.weight_versions for s in samples] == [[5, 5], [6], [6, 6]]
    assert [s.metadata["turns"] for s in samples] == [[0], [1], [2]]


def test_a_branch_whose_prompts_do_not_chain_exports_per_turn():
    trajectory = Trajectory("t")
    trajectory.branches.append(Branch(0, "0", "", [_turn([1, 2], [3], 1), _turn([1, 9], [4], 1)]))
    assert not is_concatenable(trajectory.branches[0])
    samples = to_samples(trajectory, "concat")
    assert [s.response_ids for s in samples] == [[3], [4]]


def test_only_the_latest_attempt_by_default():
    trajectory = _three_turn_trajectory()
    trajectory.branches.append(Branch(1, "1", "first request of attempt 1", [_turn([7], [8], 9)]))
    (latest,) = to_samples(trajectory)
    assert latest.metadata["attempt"] == "1" and latest.response_ids == [8]
    (first,) = to_samples(trajectory, attempt="0")
    assert first.metadata["attempt"] == "0"
    with pytest.raises(ValueError, match="export mode 'tree'"):
        to_samples(trajectory, "tree")
    assert to_samples(Trajectory("empty")) == []


def test_trajectory_json_has_turns_ids_mask_logprobs_versions():
    data = json.loads(json.dumps(trajectory_json(_three_turn_trajectory())))
    (branch,) = data["branches"]
    assert branch["reason"] == "first request of attempt 0"
    assert [t["output_ids"] for t in branch["turns"]] == [[10, 11], [12], [13, 14]]
    assert branch["turns"][1]["weight_versions"] == [6]
    assert branch["sample"]["loss_mask"] == [1, 1, 0, 0, 1, 0, 1, 1]
    assert branch["sample"]["response_ids"] == [10, 11, 4, 5, 12, 6, 13, 14]
    assert branch["sample"]["weight_versions"] == [5, 5, 5, 5, 6, 6, 6, 6]
