"""The agentic recipes through the real entry point with the tiny model: agent episodes in
sandboxes, through the router, graded, trained on. (A random tiny model fixes nothing; what
is checked is that every episode ran, was graded and reached the trainer.)

Two recipes stand for all (CI time): agentic_swe (the framework's own tool agent) and
blackbox_codex (a program in the sandbox, the quickest to start). The other black-box recipes
run the same controller path with another program: each program's preset is tested end to end
with the router in tests/integration/agentflow/agents, and every recipe composes and passes the
rules in tests/unit/config/test_recipes.py."""

from __future__ import annotations

import shutil

import pytest

from tests.integration.launch.launch_support import launch, scalars

# One RL step: the warm start has already pushed weights to the engines before it.
TINY = ["model=tiny", "run.steps=1", "rollout.prompts_per_step=1", "rollout.group_size=2", "trainer.lr=1e-3"]


@pytest.mark.parametrize(
    "recipe, agent_overrides",
    [
        (
            "agentic_swe",
            [
                "agent.options.max_turns=2",
                "agent.options.max_tokens=16",
                "warm_start.options.count=4",
                "warm_start.batch_size=2",
                "warm_start.lr=1e-2",
            ],
        ),
        pytest.param(
            "blackbox_codex",
            ["rollout.max_new_tokens=16", "warm_start.options.count=4", "warm_start.batch_size=2"],
            marks=pytest.mark.skipif(shutil.which("codex") is None, reason="Codex CLI is not installed"),
        ),
    ],
)
def test_agentic_recipe_runs_episodes_and_trains_on_them(recipe, agent_overrides, tmp_path):
    result = launch(f"recipe={recipe}", *TINY, *agent_overrides, f"run.dir={tmp_path}", timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    logged = scalars(tmp_path)
    assert logged["agent/episodes"] == {1: 2.0}
    # The random tiny model's replies are cut at 16 tokens: Codex takes a Responses reply cut at
    # max_output_tokens ("incomplete") as an error and exits 1 (so does Claude Code, after asking
    # again), which ends its episodes as errors (rollouts.jsonl keeps their output).
    assert logged["agent/error_frac"] == {1: 1.0 if recipe == "blackbox_codex" else 0.0}
    # Counted by the router, for a black-box program as for the framework's own agent loop.
    assert logged["agent/turns_mean"][1] >= 1.0 and logged["agent/branches_mean"][1] >= 1.0
    assert all(n >= 2 for n in logged["rollout/samples"].values())
    assert logged["rollout/reward_mean"] == {1: 0.0}
    assert logged["rollout/reward_errors"] == {1: 0.0}  # graded, not failed
    assert logged["rollout/grading_errors"] == {1: 0.0}
    assert max(logged["train/mismatch_k3_kl"].values()) < 1e-4  # the trained ids are the sampled ids
    rollouts = (tmp_path / "rollouts.jsonl").read_text()
    assert "sandbox preflight passed in " in result.stdout  # before the warm start
    # Warm start: 2 epochs of 4 demonstrations in batches of 2, recorded through the recipe's own
    # agent (a black-box agent: the program itself, against a scripted endpoint), then the
    # weights reach the engines before the first rollout; RL runs on synthesized tasks of another seed.
    nll = logged["warm_start/nll"]
    assert sorted(nll) == [1, 2, 3, 4] and nll[4] < nll[1]
    assert logged["rollout/weight_version"][1] == 2.0  # warm start, then step 1
    assert '"label": "synth-0-' in rollouts


def test_mixed_sources_keep_their_share_of_every_batch(tmp_path):
    result = launch(
        "recipe=agentic_mix",
        *TINY[:1],
        "run.steps=2",
        "rollout.prompts_per_step=2",
        "rollout.group_size=2",
        "agent.options.max_turns=1",
        "agent.options.max_tokens=8",
        "data.mix.1.agent_options.max_tokens=8",
        f"run.dir={tmp_path}",
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    logged = scalars(tmp_path)
    assert logged["agent/episodes"] == {1: 4.0, 2: 4.0}
    assert logged["rollout/samples/swe"] == {1: 2.0, 2: 2.0}
    assert logged["rollout/samples/arithmetic"] == {1: 2.0, 2: 2.0}
    assert set(logged["rollout/reward_mean/arithmetic"]) == {1, 2}
