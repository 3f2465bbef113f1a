"""Every policy loss, advantage estimator (the critic's too), stale filter and IcePop through
launch.py at tiny scale, grouped into four runs (they compose: test_algorithm_rules): each trains, logs its own metrics
and records its algorithm in the run's config."""

from __future__ import annotations

import math

import pytest
import yaml

from tests.integration.launch.launch_support import SMOKE, launch, scalars

RUNS = {
    "gspo_rloo": ["algorithm=gspo", "algorithm.advantage=rloo"],
    "ppo_critic": ["algorithm=ppo", "trainer.critic.lr=1e-3"],
    "cispo_reinforce_pp_opsm": ["algorithm=cispo", "algorithm.advantage=reinforce_pp", "algorithm.stale_filter=opsm"],
    "dr_grpo_m2po_icepop": [
        "algorithm=dr_grpo",
        "algorithm.stale_filter=m2po",
        *[f"algorithm.{kv}" for kv in ("is_level=token", "is_mode=mask", "is_low=0.5", "is_high=5.0")],
    ],
}


@pytest.mark.parametrize("name", sorted(RUNS))
def test_the_algorithm_trains_through_the_entry_point(name, tmp_path):
    # e_fraction varies between a random model's responses: every group has advantages to learn from.
    result = launch(*SMOKE, "data.reward=tests.toy_rewards:e_fraction", "run.steps=2", f"run.dir={tmp_path}", *RUNS[name])
    assert result.returncode == 0, result.stderr[-4000:]
    algorithm = yaml.safe_load((tmp_path / "config.yaml").read_text())["algorithm"]
    for override in RUNS[name]:
        if override.startswith("algorithm."):
            key, _, value = override.removeprefix("algorithm.").partition("=")
            assert str(algorithm[key]) == value, key
    logged = scalars(tmp_path)
    assert sorted(logged["train/loss"]) == [1, 2]
    assert all(math.isfinite(v) for v in logged["train/loss"].values())
    assert max(logged["train/grad_norm"].values()) > 0  # the loss reached the weights
    if algorithm["stale_filter"] != "none":
        assert all(0.0 <= v <= 1.0 for v in logged["train/stale_filtered_frac"].values())
    if algorithm["is_level"] != "none":
        assert sorted(logged["train/is_mask_frac"]) == [1, 2]
    if algorithm["advantage"] == "gae":
        assert all(v > 0 for v in logged["train/value_loss"].values())
        # a fresh critic values every token 0 (explains nothing); after a step it predicts something
        assert logged["train/explained_variance"][1] == 0.0 and logged["train/explained_variance"][2] != 0.0
        assert (tmp_path / "checkpoints" / "step_000002" / "trainer" / "critic" / "model.safetensors").exists()
