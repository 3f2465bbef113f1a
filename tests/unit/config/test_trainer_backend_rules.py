"""One knob per concept: trainer.world_size and trainer.strategy are the fsdp backend's, and
trainer.megatron.tp / pp / dp megatron's; rank counts and data-parallel sizes come from one
place (loongsage.config.parallel) for the rules, the placement and TrainGroup."""

from __future__ import annotations

import os
import re
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from loongsage.config import Config, ConfigError, MegatronConfig, MoeConfig, check
from loongsage.config.parallel import data_parallel_key, data_parallel_size, train_ranks, train_ranks_named
from loongsage.config.schema import RoleConfig, RolesConfig, RolloutRoleConfig
from loongsage.training.settings import trainer_settings
from tests.unit.config.test_rules import compose_config


def megatron(tp: int = 1, pp: int = 1, dp: int = 1, **trainer) -> Config:
    cfg = Config()
    cfg.trainer.backend = "megatron"
    cfg.trainer.megatron = MegatronConfig(tp=tp, pp=pp, dp=dp)
    for key, value in trainer.items():
        setattr(cfg.trainer, key, value)
    return cfg


def problems(cfg: Config) -> str:
    with pytest.raises(ConfigError) as error:
        check(cfg)
    return str(error.value)


def test_rank_count_and_data_parallel_size_per_backend():
    fsdp = Config().trainer
    fsdp.world_size = 3
    assert (train_ranks(fsdp), data_parallel_size(fsdp)) == (3, 3)
    assert train_ranks_named(fsdp) == ("trainer.world_size", "3")
    assert data_parallel_key(fsdp) == "trainer.world_size"
    m = megatron(tp=2, pp=3, dp=4).trainer
    assert (train_ranks(m), data_parallel_size(m)) == (24, 4)
    assert train_ranks_named(m) == ("trainer.megatron.tp * trainer.megatron.pp * trainer.megatron.dp", "2 * 3 * 4")
    assert data_parallel_key(m) == "trainer.megatron.dp"
    # the megatron knobs mean nothing to another backend
    fsdp.megatron = MegatronConfig(tp=2, dp=2)
    assert (train_ranks(fsdp), data_parallel_size(fsdp)) == (3, 3)


def test_the_issues_command_composes_a_two_rank_tensor_parallel_trainer():
    cfg = compose_config("recipe=math_grpo", "trainer.backend=megatron", "trainer.megatron.tp=2", "model=tiny")
    assert cfg.trainer.megatron == MegatronConfig(tp=2, pp=1, dp=1, distributed_optimizer=True)
    assert (train_ranks(cfg.trainer), data_parallel_size(cfg.trainer)) == (2, 1)


def test_megatron_defaults_pass():
    check(megatron())


def test_megatron_refuses_world_size_and_names_its_own_knobs():
    message = problems(megatron(world_size=2))
    assert (
        "trainer.world_size=2 is the fsdp backend's rank count; trainer.backend=megatron runs "
        "trainer.megatron.tp * trainer.megatron.pp * trainer.megatron.dp ranks: set trainer.megatron.dp=2 for 2 "
        "data-parallel ranks (and trainer.megatron.tp / trainer.megatron.pp for model parallelism), and leave "
        "trainer.world_size at 1"
    ) in message


def test_megatron_refuses_the_fsdp_strategy():
    message = problems(megatron(strategy="fsdp2"))
    assert "trainer.strategy=fsdp2 is the fsdp backend's sharding; trainer.backend=megatron shards with" in message
    assert "leave trainer.strategy at ddp" in message


def test_megatron_knobs_without_the_megatron_backend_are_refused_by_name():
    cfg = Config()
    cfg.trainer.megatron = MegatronConfig(tp=2, distributed_optimizer=False)
    message = problems(cfg)
    assert (
        "trainer.megatron.tp=2, trainer.megatron.distributed_optimizer=False only applies to trainer.backend=megatron "
        "(got trainer.backend='fsdp'): set trainer.backend=megatron, or leave trainer.megatron.* at the defaults"
    ) in message
    with pytest.raises(ConfigError, match=re.escape("trainer.megatron.dp=2 only applies to trainer.backend=megatron")):
        compose_config("trainer.megatron.dp=2")


def test_expert_parallelism_is_carved_out_of_the_tensor_and_data_parallel_ranks():
    """trainer.megatron.ep adds no ranks: it must divide tp * dp (megatron's expert groups)."""
    for tp, dp, ep in ((1, 2, 2), (2, 2, 4), (1, 4, 2), (2, 1, 2)):
        cfg = megatron(tp=tp, dp=dp, micro_batch_size=2)
        cfg.trainer.megatron.ep = ep
        check(cfg)
        assert train_ranks(cfg.trainer) == tp * dp
    cfg = megatron(dp=2)
    cfg.trainer.megatron.ep = 4
    assert (
        "trainer.megatron.ep=4 must divide trainer.megatron.tp * trainer.megatron.dp = 1 * 2 = 2: megatron forms the "
        "expert-parallel groups out of each pipeline stage's tensor- and data-parallel ranks"
    ) in problems(cfg)
    cfg = megatron(dp=2)
    cfg.trainer.megatron.ep = 0
    message = problems(cfg)
    assert "trainer.megatron.ep=0 must be >= 1" in message and "must divide" not in message
    fsdp = Config()
    fsdp.trainer.megatron = MegatronConfig(ep=2)
    assert "trainer.megatron.ep=2 only applies to trainer.backend=megatron" in problems(fsdp)


def test_router_settings_are_refused_by_name_under_a_backend_that_does_not_read_them():
    cfg = Config()
    cfg.trainer.backend = "my_trainers.worker:PluginWorker"  # an import path: not known to read them
    cfg.trainer.moe.aux_loss_coeff = 0.01
    cfg.trainer.moe.freeze_router = True
    assert (
        "trainer.moe.aux_loss_coeff=0.01, trainer.moe.freeze_router=True is not read by "
        "trainer.backend=my_trainers.worker:PluginWorker (only by trainer.backend=fsdp, trainer.backend=megatron): "
        "set trainer.backend=fsdp, or leave trainer.moe.* at the defaults"
    ) in problems(cfg)
    for cfg in (Config(), megatron()):
        cfg.trainer.moe.aux_loss_coeff = 0.01
        cfg.trainer.moe.freeze_router = True
        check(cfg)
    cfg.trainer.moe.aux_loss_coeff = -1.0
    assert "trainer.moe.aux_loss_coeff=-1.0 must be >= 0" in problems(cfg)
    composed = compose_config("recipe=math_grpo", "trainer.backend=megatron", "trainer.moe.freeze_router=true", "model=tiny")
    assert trainer_settings(composed.trainer).moe == MoeConfig(aux_loss_coeff=None, freeze_router=True)


@pytest.mark.parametrize("field", ["tp", "pp", "dp"])
def test_megatron_sizes_must_be_positive(field):
    message = problems(megatron(**{field: 0}))
    assert f"trainer.megatron.{field}=0 must be >= 1" in message


def test_megatron_batch_divides_by_the_data_parallel_size_not_the_rank_count():
    # 6 samples: tensor parallelism does not split the batch, so tp=2 (2 ranks, 1 shard) of micro-batches of 2 fits...
    base = {"trainer.micro_batch_size": 2, "rollout.prompts_per_step": 3, "rollout.group_size": 2}
    check(with_settings(megatron(tp=2), base))
    # ...while 2 data-parallel shards of 2 do not, and the message names trainer.megatron.dp
    message = problems(with_settings(megatron(dp=2), base))
    assert (
        "rollout.prompts_per_step * rollout.group_size = 3 * 2 = 6 samples per step must be divisible by "
        "trainer.megatron.dp * trainer.mini_batches * trainer.micro_batch_size = 2 * 1 * 2 = 4"
    ) in message
    # the fsdp backend's 2 ranks are 2 shards, named as before
    fsdp = with_settings(Config(), {**base, "trainer.world_size": 2})
    assert "trainer.world_size * trainer.mini_batches * trainer.micro_batch_size = 2 * 1 * 2 = 4" in problems(fsdp)


def test_megatron_ranks_count_for_the_cores_of_a_disaggregated_run():
    cores = len(os.sched_getaffinity(0))
    cfg = with_settings(megatron(tp=cores), {"run.placement": "disaggregated", "run.mode": "fully_async"})
    assert (
        f"trainer.megatron.tp * trainer.megatron.pp * trainer.megatron.dp + rollout.num_engines = "
        f"{cores} * 1 * 1 + 1 = {cores + 1} > {cores} cores on this machine"
    ) in problems(cfg)


def test_megatron_ranks_must_fill_the_trainer_devices():
    def partitioned(cfg: Config, trainer_gpus: int) -> Config:
        cfg.roles = RolesConfig(trainer=RoleConfig(gpus=trainer_gpus), rollout=RolloutRoleConfig(gpus=2))
        cfg.run.placement, cfg.rollout.num_engines = "disaggregated", 2
        return cfg

    check(partitioned(megatron(tp=2, dp=2), 4))
    message = problems(partitioned(megatron(tp=2, dp=2), 8))
    assert (
        "trainer.megatron.tp * trainer.megatron.pp * trainer.megatron.dp = 2 * 1 * 2 = 4 trainer ranks must equal "
        "roles.trainer.gpus=8 (one trainer rank per device once roles are partitioned); "
        "set trainer.megatron.dp=4 or roles.trainer.gpus=4"
    ) in message
    # 6 devices cannot hold copies of tp * pp = 4 ranks: only the device count is suggested
    assert "; set roles.trainer.gpus=4\n" in problems(partitioned(megatron(tp=2, pp=2), 6)) + "\n"


def test_trainer_settings_turn_any_megatron_node_into_the_dataclass():
    node = OmegaConf.create({"backend": "megatron", "megatron": {"tp": 2, "dp": 3}})
    settings = trainer_settings(node)
    assert type(settings.megatron) is MegatronConfig
    assert settings.megatron == MegatronConfig(tp=2, pp=1, dp=3)
    assert (train_ranks(settings), data_parallel_size(settings)) == (6, 3)
    assert trainer_settings(SimpleNamespace(world_size=2)).megatron == MegatronConfig()


def with_settings(cfg: Config, settings: dict) -> Config:
    for dotted, value in settings.items():
        section, _, key = dotted.partition(".")
        setattr(getattr(cfg, section), key, value)
    return cfg
