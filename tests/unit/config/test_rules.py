from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException

from loongsage.config import Config, ConfigError, check, register, to_config
from tests.paths import RECIPES_DIR

register()


def compose_config(*overrides: str) -> Config:
    with initialize_config_dir(config_dir=str(RECIPES_DIR), version_base=None):
        return to_config(compose(config_name="config", overrides=list(overrides)))


def test_recipe_and_model_groups_compose():
    cfg = compose_config("recipe=math_grpo", "model=tiny", "run.steps=2")
    assert cfg.model.name == "tiny"
    assert cfg.run.name == "math_grpo"
    assert cfg.run.steps == 2
    assert cfg.rollout.group_size == 8


def test_unknown_key_is_refused_by_name():
    with pytest.raises(ConfigCompositionException) as error:
        compose_config("run.stepz=3")
    assert "stepz" in str(error.value.__cause__ or error.value)


def test_wrong_type_is_refused_by_name():
    with pytest.raises(ConfigCompositionException) as error:
        compose_config("run.steps=many")
    assert "run.steps" in str(error.value.__cause__)


@pytest.mark.parametrize("advantage", ["grpo", "dr_grpo", "rloo"])
def test_group_relative_advantages_need_a_group(advantage):
    with pytest.raises(ConfigError, match=rf"rollout.group_size=1 must be >= 2 for algorithm.advantage={advantage}"):
        compose_config("rollout.group_size=1", "trainer.micro_batch_size=1", f"algorithm.advantage={advantage}")


def test_reinforce_pp_needs_no_group():
    compose_config("rollout.group_size=1", "trainer.micro_batch_size=1", "algorithm.advantage=reinforce_pp")


def test_batch_divisibility_names_every_field_with_arithmetic():
    with pytest.raises(ConfigError) as error:
        compose_config("rollout.prompts_per_step=3", "rollout.group_size=2", "trainer.micro_batch_size=4")
    message = str(error.value)
    assert "rollout.prompts_per_step * rollout.group_size = 3 * 2 = 6" in message
    assert "trainer.world_size * trainer.mini_batches * trainer.micro_batch_size = 1 * 1 * 4 = 4" in message


def test_every_problem_is_reported_at_once():
    cfg = Config()
    cfg.trainer.lr = -1.0
    cfg.rollout.top_p = 1.5
    cfg.trainer.strategy = "zero3"
    with pytest.raises(ConfigError) as error:
        check(cfg)
    message = str(error.value)
    for field in ("trainer.lr=-1.0", "rollout.top_p=1.5", "trainer.strategy='zero3'"):
        assert field in message


def test_defaults_pass_the_rules():
    check(Config())


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("algorithm.is_mode=clip", "algorithm.is_mode='clip' is not one of truncate, mask"),
        ("algorithm.is_level=tokens", "algorithm.is_level='tokens' is not one of none, token, sequence, geometric"),
        ("algorithm.proximal=stale", "algorithm.proximal='stale' is not one of recompute, interpolate, behaviour"),
        ("algorithm.is_high=0", "algorithm.is_high=0.0 must be > 0"),
        ("algorithm.is_low=3", r"algorithm.is_low=3.0 must be in \[0, algorithm.is_high=2.0\)"),
    ],
)
def test_bad_off_policy_settings_name_the_field(override, message):
    with pytest.raises(ConfigError, match=message):
        compose_config(override)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["run.keep_checkpoints=-1"], "run.keep_checkpoints=-1 must be >= 0"),
        (["run.keep_every=20"], "run.keep_every=20 selects checkpoints to keep among those deleted, but run.keep_checkpoints=0"),
        (
            ["run.keep_checkpoints=2", "run.save_every=10", "run.keep_every=15"],
            "run.keep_every=15 is not a multiple of run.save_every=10",
        ),
    ],
)
def test_checkpoint_retention_settings_are_refused_by_name(overrides, message):
    with pytest.raises(ConfigError, match=message):
        compose_config(*overrides)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["run.max_restarts=0"], "run.spare_trainer=true keeps processes for trainer restarts, but run.max_restarts=0"),
        (["roles.trainer.gpus=1"], r"run.spare_trainer=true needs trainer ranks on CPUs, not roles.trainer.gpus=1"),
    ],
)
def test_spare_trainer_processes_are_refused_where_they_could_not_be_adopted(overrides, message):
    with pytest.raises(ConfigError, match=message):
        compose_config("run.spare_trainer=true", *overrides)


def test_checkpoint_retention_composes():
    cfg = compose_config("run.keep_checkpoints=2", "run.save_every=5", "run.keep_every=20")
    assert (cfg.run.keep_checkpoints, cfg.run.keep_every) == (2, 20)


def test_trajectory_bounds_are_refused_below_zero_and_without_an_agent():
    with pytest.raises(ConfigError, match=r"router.max_turns_per_trajectory=-1 must be >= 0"):
        compose_config("recipe=agentic_swe", "router.max_turns_per_trajectory=-1")
    with pytest.raises(ConfigError, match=r"router.max_tokens_per_trajectory=100 is read by the AgentFlow router"):
        compose_config("recipe=math_grpo", "router.max_tokens_per_trajectory=100")
