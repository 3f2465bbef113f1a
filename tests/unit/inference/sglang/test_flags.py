"""The SGLang server's command line and environment, from a LaunchSpec."""

from __future__ import annotations

import pytest

from loongsage.inference.embedded.cli import parse_args
from loongsage.inference.sglang.flags import DERIVED_FLAGS, LaunchSpec, launch_env, launch_flags


def _spec(**overrides) -> LaunchSpec:
    fields = {"model_path": "/models/m", "host": "10.0.0.5", "port": 30001, "nccl_port": 30002}
    return LaunchSpec(**{**fields, **overrides})


def _value(flags: list[str], flag: str) -> str:
    return flags[flags.index(flag) + 1]


def test_flags_carry_every_field():
    flags = launch_flags(
        _spec(
            tp_size=4,
            ep_size=2,
            enable_return_routed_experts=True,
            dtype="bfloat16",
            context_length=4096,
            max_running_requests=128,
            weight_version="0",
            mem_fraction_static=0.6,
            random_seed=7,
        )
    )
    assert flags[:2] == ["--model-path", "/models/m"]
    expected = {
        "--host": "10.0.0.5",
        "--port": "30001",
        "--nccl-port": "30002",
        "--tp-size": "4",
        "--ep-size": "2",
        "--dtype": "bfloat16",
        "--context-length": "4096",
        "--max-running-requests": "128",
        "--weight-version": "0",
        "--mem-fraction-static": "0.6",
        "--base-gpu-id": "0",
        "--random-seed": "7",
    }
    assert {flag: _value(flags, flag) for flag in expected} == expected
    assert "--skip-server-warmup" in flags and "--enable-return-routed-experts" in flags
    # Not colocated, one node: no memory saver, no multi-node flags.
    assert not {"--enable-memory-saver", "--nnodes", "--node-rank", "--dist-init-addr"} & set(flags)


def test_unset_optional_flags_are_left_to_the_server():
    flags = launch_flags(_spec())
    assert not {"--context-length", "--max-running-requests", "--random-seed", "--ep-size"} & set(flags)
    assert "--enable-return-routed-experts" not in flags


def test_colocated_engine_enables_the_memory_saver():
    assert "--enable-memory-saver" in launch_flags(_spec(enable_memory_saver=True))


def test_multi_node_flags_only_beyond_one_node():
    flags = launch_flags(_spec(nnodes=2, node_rank=1, dist_init_addr="10.0.0.4:5000"))
    assert [_value(flags, f) for f in ("--nnodes", "--node-rank", "--dist-init-addr")] == ["2", "1", "10.0.0.4:5000"]


def test_extra_args_come_last_verbatim():
    flags = launch_flags(_spec(extra_args=("--attention-backend", "fa3", "--trust-remote-code")))
    assert flags[-3:] == ["--attention-backend", "fa3", "--trust-remote-code"]


@pytest.mark.parametrize(
    "extra, flag, config",
    [
        (("--tp-size", "2"), "--tp-size", "roles.rollout.tp"),
        (("--tp=2",), "--tp-size", "roles.rollout.tp"),  # SGLang's alias, in --flag=value form
        (("--mem-fraction-static=0.5",), "--mem-fraction-static", "rollout.sglang.mem_fraction_static"),
        (("--context-length", "9"), "--context-length", "rollout.max_context"),
    ],
)
def test_extra_args_repeating_a_derived_flag_are_refused_naming_its_config(extra, flag, config):
    with pytest.raises(ValueError, match="rollout.sglang.extra_args") as error:
        _spec(extra_args=extra)
    assert flag in str(error.value) and config in str(error.value)


@pytest.mark.parametrize(
    "overrides, named",
    [
        ({"tp_size": 0}, "roles.rollout.tp"),
        ({"tp_size": 4, "ep_size": 3}, "roles.rollout.ep"),
        ({"dtype": "fp32"}, "rollout.dtype"),
        ({"mem_fraction_static": 1.5}, "rollout.sglang.mem_fraction_static"),
        ({"port": 70000}, "LaunchSpec.port"),
        ({"nnodes": 2}, "dist_init_addr"),
        ({"nnodes": 2, "node_rank": 2, "dist_init_addr": "h:1"}, "node_rank"),
        ({"context_length": 0}, "rollout.max_context"),
        ({"max_running_requests": 0}, "rollout.max_running"),
    ],
)
def test_bad_spec_is_refused_naming_the_field(overrides, named):
    with pytest.raises(ValueError, match=named):
        _spec(**overrides)


def test_every_derived_flag_is_one_the_embedded_server_accepts():
    """The CPU stand-in takes the same command line: every flag we emit parses there."""
    spec = _spec(
        context_length=64,
        max_running_requests=2,
        random_seed=1,
        enable_memory_saver=True,
        enable_return_routed_experts=True,
        host="127.0.0.1",
    )
    args = parse_args(launch_flags(spec))
    assert (args.port, args.context_length, args.max_running_requests, args.random_seed) == (30001, 64, 2, 1)
    emitted = {arg for arg in launch_flags(spec) if arg.startswith("--")}
    assert emitted <= set(DERIVED_FLAGS)


def test_env_names_the_seat_devices_and_the_actor_threads():
    env = launch_env({"PATH": "/bin", "CUDA_VISIBLE_DEVICES": "3", "OMP_NUM_THREADS": "1"}, gpus=(3, 5), threads=6)
    assert env["CUDA_VISIBLE_DEVICES"] == "3,5"  # all the seat's devices, not only Ray's one
    assert env["OMP_NUM_THREADS"] == "6"
    assert env["PATH"] == "/bin"
    assert int(env["SGLANG_HEALTH_CHECK_TIMEOUT"]) > 20  # SGLang's default gives up during a weight broadcast
    assert env["SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION"] == "false"  # /health: liveness, not a generation
    assert env["PYTHONUNBUFFERED"] == "1"


def test_env_without_a_seat_keeps_what_ray_set_and_a_users_sglang_setting():
    env = launch_env({"CUDA_VISIBLE_DEVICES": "2", "OMP_NUM_THREADS": "1", "SGLANG_HEALTH_CHECK_TIMEOUT": "45"}, None, None)
    assert (env["CUDA_VISIBLE_DEVICES"], env["OMP_NUM_THREADS"], env["SGLANG_HEALTH_CHECK_TIMEOUT"]) == ("2", "1", "45")
