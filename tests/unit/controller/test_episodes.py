"""An agent episode exported as several branches counts once: in its group's advantages, and in
the loss under every aggregation mode, exactly as the same episode as one sample."""

from __future__ import annotations

import json

import pytest
import torch.distributed as dist

from loongsage.algorithms.advantages import get_advantage
from loongsage.algorithms.losses import AGGREGATION_MODES
from loongsage.controller.episodes import assign_episodes
from loongsage.controller.metrics import rollout_metrics
from loongsage.sample import Sample
from loongsage.training.batch import pack_samples, split_micro_batches
from loongsage.training.shares import global_shares

PROMPT = [5, 6, 7]
# Episode "a": three branches (one with tool output the loss does not train); "b": one; "c": one
# whose reward differs, so that the group's std is not degenerate.
A_BRANCHES = [([11, 12], [1, 1]), ([13, 14, 15, 16], [1, 0, 0, 1]), ([17], [1])]
B = ([21, 22, 23, 24, 25], [1, 1, 1, 1, 1])
C = ([31, 32], [1, 1])


def sample(episode: str, response: list[int], mask: list[int], reward: float) -> Sample:
    return Sample(PROMPT, response, loss_mask=mask, reward=reward, group_id=0, metadata={"trajectory_id": episode})


def as_branches() -> list[Sample]:
    return [sample("a", r, m, 1.0) for r, m in A_BRANCHES] + [sample("b", *B, 0.0), sample("c", *C, 0.5)]


def as_one_sample_each() -> list[Sample]:
    response = [token for r, _ in A_BRANCHES for token in r]
    mask = [bit for _, m in A_BRANCHES for bit in m]
    return [sample("a", response, mask, 1.0), sample("b", *B, 0.0), sample("c", *C, 0.5)]


def test_agent_turns_and_branches_are_counted_per_episode():
    samples = as_branches()
    for s in samples:
        turns, branches = (5, 3) if s.metadata["trajectory_id"] == "a" else (1, 1)
        dropped = {"web_search": 2} if s.metadata["trajectory_id"] == "a" else {}
        refusals = 2 if s.metadata["trajectory_id"] == "a" else 0
        s.metadata.update(
            exit_status="submitted",
            episode_turns=turns,
            episode_branches=branches,
            hosted_tools_dropped=dropped,
            budget_refusals=refusals,
        )
    metrics = rollout_metrics(samples)
    assert metrics["agent/episodes"] == 3.0
    assert metrics["agent/turns_mean"] == pytest.approx(7 / 3)  # (5 + 1 + 1) / 3, not weighted by branches
    assert metrics["agent/branches_mean"] == pytest.approx(5 / 3)
    assert metrics["agent/hosted_tools_dropped"] == 2.0  # per episode, not per branch
    assert metrics["agent/budget_exhausted_frac"] == pytest.approx(1 / 3)  # episodes, not refusals


@pytest.fixture
def one_rank():
    created = not dist.is_initialized()
    if created:
        dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
    yield
    if created:
        dist.destroy_process_group()


def batch_loss(samples: list[Sample], mode: str, micro_batch_size: int) -> float:
    """The step's loss over micro-batches as the trainer weighs them; each trained token's value
    is its advantage times a number that depends only on the token (as a log-ratio would)."""
    micros = [pack_samples(chunk) for chunk in split_micro_batches(samples, micro_batch_size)]
    loss = 0.0
    for share, micro in zip(global_shares(micros, mode), micros):
        values = micro.advantages * (micro.targets.float() / 10.0).sin()
        loss += share * micro.aggregation(mode, norm_length=16)(values, micro.loss_mask).item()
    return loss


def test_every_branch_carries_its_episodes_advantage():
    grpo = get_advantage("grpo")
    branches, merged = as_branches(), as_one_sample_each()
    assign_episodes(branches, grpo, normalize_std=True)
    assign_episodes(merged, grpo, normalize_std=True)
    assert [s.advantage for s in branches] == [merged[0].advantage] * 3 + [merged[1].advantage, merged[2].advantage]
    assert merged[0].advantage > 0 > merged[1].advantage
    assert [s.episode_share for s in branches] == [2 / 5, 2 / 5, 1 / 5, 1.0, 1.0]


@pytest.mark.usefixtures("one_rank")
@pytest.mark.parametrize("mode", AGGREGATION_MODES)
@pytest.mark.parametrize("micro_batch_size", [1, 2, 8])
def test_the_loss_is_the_one_sample_per_episode_loss(mode, micro_batch_size):
    grpo = get_advantage("grpo")
    branches, merged = as_branches(), as_one_sample_each()
    assign_episodes(branches, grpo, normalize_std=True)
    assign_episodes(merged, grpo, normalize_std=True)
    expected = batch_loss(merged, mode, micro_batch_size=8)
    assert expected != 0.0
    assert batch_loss(branches, mode, micro_batch_size) == pytest.approx(expected, rel=1e-6)


@pytest.mark.usefixtures("one_rank")
def test_without_shares_a_split_episode_would_weigh_more():
    """What the shares prevent: the same branches each counted as a sequence of its own."""
    grpo = get_advantage("grpo")
    branches, merged = as_branches(), as_one_sample_each()
    assign_episodes(branches, grpo, normalize_std=True)
    assign_episodes(merged, grpo, normalize_std=True)
    for branch in branches:
        branch.episode_share = 1.0
    expected = batch_loss(merged, "seq_mean_token_mean", micro_batch_size=8)
    assert batch_loss(branches, "seq_mean_token_mean", 8) != pytest.approx(expected, rel=1e-3)


def test_rollouts_jsonl_says_how_each_episode_ended_and_why_one_failed(tmp_path):
    from loongsage.config.schema import LoggingConfig
    from loongsage.controller.monitor import Monitor

    samples = as_branches()
    for s in samples:
        failed = s.metadata["trajectory_id"] == "b"
        s.metadata.update(
            exit_status="error" if failed else "exited",
            episode_turns=2,
            episode_branches=1,
            hosted_tools_dropped={},
            agent_log=["API Error: response exceeded the 16 output token maximum", "exit code 1 after 2.4 s"],
        )
    monitor = Monitor(LoggingConfig(tensorboard=False, rollouts_per_step=8), tmp_path, total_steps=1, start_step=0)
    monitor.log(1, rollout_metrics(samples), samples)
    records = [json.loads(line) for line in (tmp_path / "rollouts.jsonl").read_text().splitlines()]
    assert [r["exit_status"] for r in records] == ["exited", "exited", "exited", "error", "exited"]
    assert records[3]["agent_log"][-1] == "exit code 1 after 2.4 s"
    assert "agent_log" not in records[0] and "hosted_tools_dropped" not in records[0]
