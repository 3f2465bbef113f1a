"""Each choice list comes from the module that implements it, and a setting the chosen parts
do not read is refused by name, never accepted and ignored."""

from __future__ import annotations

import importlib

import pytest

from loongsage.config import Config, ConfigError, check
from loongsage.config.owned_choices import OwnedChoices
from loongsage.config.rules import CHOICES
from loongsage.sampling import SamplingDefaults


def problems(cfg: Config) -> str:
    with pytest.raises(ConfigError) as error:
        check(cfg)
    return str(error.value)


@pytest.mark.parametrize(
    ("key", "owner"),
    [
        ("algorithm.kl_kind", "loongsage.algorithms.losses:KL_KINDS"),
        ("algorithm.loss_aggregation", "loongsage.algorithms.losses:AGGREGATION_MODES"),
        ("algorithm.proximal", "loongsage.training.objective:PROXIMAL_SOURCES"),
        ("algorithm.is_level", "loongsage.algorithms.off_policy:IS_LEVELS"),
        ("algorithm.is_mode", "loongsage.algorithms.off_policy:IS_MODES"),
        ("cluster.container.runtime", "loongsage.config.container:RUNTIMES"),
        ("trainer.weight_sync", "loongsage.transfer.transport_choice:WEIGHT_SYNCS"),
        ("trainer.strategy", "loongsage.training.fsdp.parallel:STRATEGIES"),
        ("agent.export", "loongsage.agentflow.router.export:MODES"),
        ("run.placement", "loongsage.config.placement:PLACEMENTS"),
        ("rollout.engine", "loongsage.inference.engines:ENGINES"),
    ],
)
def test_a_keys_choices_are_its_owners_object(key, owner):
    module, _, name = owner.partition(":")
    choices = CHOICES[key]
    resolved = choices.choices if isinstance(choices, OwnedChoices) else choices
    assert resolved is getattr(importlib.import_module(module), name)


def test_run_modes_are_the_tables_rows():
    from loongsage.config.run_modes import RUN_MODES

    assert CHOICES["run.mode"] == tuple(RUN_MODES)


def test_an_owned_choice_names_the_key_and_the_choices():
    cfg = Config()
    cfg.agent.export = "flat"
    assert "agent.export='flat' is not one of concat, per_turn" in problems(cfg)


def test_gradient_checkpointing_under_megatron_is_refused():
    cfg = Config()
    cfg.trainer.backend = "megatron"
    cfg.trainer.gradient_checkpointing = True
    assert "trainer.gradient_checkpointing=true is read by the fsdp backend only" in problems(cfg)


def test_sglang_settings_under_the_embedded_engine_are_refused_by_name():
    cfg = Config()
    cfg.rollout.sglang.startup_timeout_s = 5.0
    cfg.rollout.sglang.extra_args = ["--attention-backend", "fa3"]
    message = problems(cfg)
    named = "rollout.sglang.extra_args=['--attention-backend', 'fa3'], rollout.sglang.startup_timeout_s=5.0"
    assert f"{named} only applies" in message


def test_sglang_settings_under_sglang_pass():
    cfg = Config()
    cfg.rollout.engine = "sglang"
    cfg.rollout.sglang.startup_timeout_s = 5.0
    check(cfg)


def test_engine_expert_parallelism_is_sglangs_and_divides_tp():
    cfg = Config()
    cfg.roles.rollout.ep = 2
    assert "roles.rollout.ep=2: the embedded engine runs every expert in one process" in problems(cfg)
    cfg.rollout.engine = "sglang"
    assert "roles.rollout.ep=2 must divide roles.rollout.tp=1" in problems(cfg)
    cfg.roles.rollout.tp = 4
    check(cfg)


def test_reward_workers_with_an_agent_are_refused_and_without_one_pass():
    cfg = Config()
    cfg.data.num_reward_workers = 4
    check(cfg)
    cfg.agent.name = "tool"
    assert "data.num_reward_workers=4 is not read when agent.name is set" in problems(cfg)


def test_one_default_for_max_new_tokens():
    from loongsage.config.schema import RolloutConfig
    from loongsage.inference.embedded.sampling import SamplingParams

    assert RolloutConfig().max_new_tokens == SamplingDefaults().max_new_tokens == SamplingParams().max_new_tokens
