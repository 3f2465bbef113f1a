"""Keys that choose a registry entry (rollout.engine, trainer.backend, algorithm.advantage,
algorithm.policy_loss) take a registered name or an import path that resolves; anything else
is named with the field and the registered choices."""

from __future__ import annotations

import pytest

from loongsage.config import Config, ConfigError, check


def configured(key: str, value: str) -> Config:
    cfg = Config()
    section, _, field = key.partition(".")
    setattr(getattr(cfg, section), field, value)
    return cfg


@pytest.mark.parametrize(
    ("key", "value", "known"),
    [
        ("rollout.engine", "vllm", "embedded, sglang"),
        ("trainer.backend", "deepspeed", "fsdp, megatron"),
        ("algorithm.advantage", "vtrace", "dr_grpo, grpo, reinforce_pp, rloo"),
        ("algorithm.policy_loss", "sapo", "cispo, gspo, ppo_clip"),
    ],
)
def test_an_unregistered_name_is_named_with_the_field_and_the_choices(key, value, known):
    with pytest.raises(ConfigError, match=rf"{key}='{value}': unknown .* '{value}'; known: {known}, or an import path"):
        check(configured(key, value))


@pytest.mark.parametrize(
    ("key", "path"),
    [
        ("algorithm.advantage", "loongsage.algorithms.advantages:grouped_advantages"),
        ("algorithm.policy_loss", "loongsage.algorithms.policy_losses:ppo_clip_loss"),
        ("trainer.backend", "loongsage.training.fsdp.worker:TrainWorker"),
    ],
)
def test_an_import_path_that_resolves_is_a_choice(key, path):
    check(configured(key, path))


def test_an_import_path_that_does_not_resolve_says_why():
    with pytest.raises(
        ConfigError,
        match=r"algorithm.policy_loss='loongsage.algorithms.losses:no_such_loss': "
        r".*has no attribute 'no_such_loss'",
    ):
        check(configured("algorithm.policy_loss", "loongsage.algorithms.losses:no_such_loss"))
