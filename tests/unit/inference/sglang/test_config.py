"""engine_cfg of an SGLang engine actor: checked at construction, naming the key."""

from __future__ import annotations

import dataclasses

import pytest

from loongsage.config.schema import RolloutConfig, SglangConfig
from loongsage.inference.sglang.config import EngineSettings, launch_spec

# What EngineFleet gives every engine, plus rollout.sglang and the engine's seat.
ENGINE_CFG = {"max_running": 8, "max_context": 512, "num_threads": 2, "dtype": "float32", "weight_version": "0"}


def _cfg(**sglang) -> dict:
    return {**ENGINE_CFG, "sglang": {**dataclasses.asdict(SglangConfig()), "index": 2, "tp": 2, "gpus": [4, 5], **sglang}}


def test_every_sglang_config_field_and_seat_key_is_taken():
    settings = EngineSettings.from_dict(_cfg(colocated=True, log_dir="/tmp/x", extra_args=["--trust-remote-code"]))
    assert settings.sglang.command == tuple(SglangConfig().command)
    assert (settings.sglang.index, settings.sglang.tp, settings.sglang.gpus) == (2, 2, (4, 5))
    assert settings.sglang.extra_args == ("--trust-remote-code",)
    assert settings.max_context == 512


def test_spec_follows_the_settings():
    settings = EngineSettings.from_dict({**_cfg(colocated=True, mem_fraction_static=0.5, ep=2), "return_routed_experts": True})
    spec = launch_spec("/m", settings, "h", 1000, 1001)
    assert (spec.tp_size, spec.ep_size, spec.enable_return_routed_experts) == (2, 2, True)
    assert (spec.dtype, spec.context_length, spec.max_running_requests) == ("float32", 512, 8)
    assert (spec.weight_version, spec.mem_fraction_static, spec.enable_memory_saver, spec.base_gpu_id) == ("0", 0.5, True, 0)
    assert (spec.port, spec.nccl_port, spec.host) == (1000, 1001, "h")


def test_an_engine_spanning_nodes_gives_each_node_rank_its_flags():
    followers = [{"gpus": [0, 1], "ray_options": {"num_gpus": 1.0}}]
    settings = EngineSettings.from_dict(_cfg(tp=4, gpus=[2, 3], followers=followers))
    assert settings.sglang.nnodes == 2 and settings.sglang.followers[0]["gpus"] == (0, 1)
    head = launch_spec("/m", settings, "10.0.0.1", 1000, 1001, 0, "10.0.0.1:1002")
    node1 = launch_spec("/m", settings, "10.0.0.1", 1000, 1001, 1, "10.0.0.1:1002")
    assert (head.nnodes, head.node_rank, head.tp_size, head.dist_init_addr) == (2, 0, 4, "10.0.0.1:1002")
    assert (node1.node_rank, node1.port, node1.dist_init_addr) == (1, 1000, "10.0.0.1:1002")
    # one node's devices per node rank: tp / nnodes each
    with pytest.raises(ValueError, match=r"node rank 1 has 1 device\(s\) \[0\] but roles.rollout.tp=4 over 2 node\(s\) is 2"):
        EngineSettings.from_dict(_cfg(tp=4, gpus=[2, 3], followers=[{"gpus": [0], "ray_options": {}}]))
    with pytest.raises(ValueError, match=r"\['followers'\]\[0\]=\{'devices'"):
        EngineSettings.from_dict(_cfg(tp=4, gpus=[2, 3], followers=[{"devices": [0, 1]}]))
    with pytest.raises(ValueError, match="'nnodes'"):  # derived from the followers, never given
        EngineSettings.from_dict(_cfg(nnodes=2))


def test_without_engine_cfg_everything_has_a_default():
    settings = EngineSettings.from_dict(None)
    assert settings.sglang.max_restarts == RolloutConfig().max_engine_restarts and settings.sglang.gpus is None


@pytest.mark.parametrize(
    "engine_cfg, named",
    [
        ({**ENGINE_CFG, "max_runing": 4}, "'max_runing'"),
        ({"sglang": {"max_restart": 1}}, "'max_restart'"),
        ({"sglang": {"tp": 2, "gpus": [0]}}, "roles.rollout.tp=2"),
        ({"sglang": {"command": "python -m sglang.launch_server"}}, "rollout.sglang.command"),
        ({"sglang": {"command": []}}, "rollout.sglang.command is empty"),
        ({"sglang": {"extra_args": "--x"}}, "rollout.sglang.extra_args"),
        ({"sglang": {"max_restarts": -1}}, "rollout.max_engine_restarts"),
        ({"sglang": {"startup_timeout_s": 0}}, "rollout.sglang.startup_timeout_s"),
        ({"sglang": {"index": -1}}, "index"),
        ({"max_running": "8"}, "'max_running'"),
        ({"sglang": {"colocated": "yes"}}, "'colocated'"),
        ({"num_threads": 0}, "rollout.num_threads"),
    ],
)
def test_bad_engine_cfg_is_refused_naming_the_key(engine_cfg, named):
    with pytest.raises(ValueError) as error:
        EngineSettings.from_dict(engine_cfg)
    assert named in str(error.value)
