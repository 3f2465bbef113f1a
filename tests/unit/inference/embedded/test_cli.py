"""SGLang launch_server flags as the embedded engine's command line reads them."""

from __future__ import annotations

import pytest

from loongsage.inference.embedded.cli import engine_config, launch_flags, parse_args


def _fails(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exited:
        parse_args(argv)
    assert exited.value.code == 2
    return capsys.readouterr().err


def test_defaults_match_sglang_and_the_engine():
    args = parse_args(["--model-path", "/m"])
    assert (args.host, args.port, args.tp_size, args.nnodes, args.node_rank) == ("127.0.0.1", 30000, 1, 1, 0)
    cfg = engine_config(args, environ={})
    assert cfg.dtype == "float32" and cfg.weight_version == "default" and cfg.num_threads is None
    assert (cfg.max_context, cfg.max_running, cfg.seed) == (2048, 32, 0)  # EngineConfig's own defaults


def test_shared_flags_reach_the_engine_config():
    args = parse_args(
        "--model-path /m --dtype bfloat16 --context-length 512 --max-running-requests 4 --random-seed 7 "
        "--weight-version v3 --enable-return-routed-experts".split()
    )
    cfg = engine_config(args, environ={"OMP_NUM_THREADS": "3"})
    assert (cfg.dtype, cfg.max_context, cfg.max_running, cfg.seed, cfg.weight_version, cfg.num_threads) == (
        "bfloat16",
        512,
        4,
        7,
        "v3",
        3,
    )
    assert cfg.return_routed_experts and not engine_config(parse_args(["--model-path", "/m"]), {}).return_routed_experts


def test_gpu_only_flags_are_accepted_and_recorded():
    argv = (
        "--model-path /m --tp 1 --mem-fraction-static 0.55 --enable-memory-saver --base-gpu-id 3 --nccl-port 29555 "
        "--dist-init-addr 10.0.0.1:5000 --nnodes 1 --node-rank 0 --skip-server-warmup --log-level WARNING "
        "--trust-remote-code --disable-cuda-graph --host 0.0.0.0 --port 31000"
    ).split()
    flags = launch_flags(parse_args(argv))
    assert flags["mem_fraction_static"] == 0.55 and flags["enable_memory_saver"] is True
    assert flags["base_gpu_id"] == 3 and flags["nccl_port"] == 29555 and flags["dist_init_addr"] == "10.0.0.1:5000"
    assert flags["skip_server_warmup"] and flags["trust_remote_code"] and flags["disable_cuda_graph"]
    assert (flags["tp_size"], flags["log_level"], flags["host"], flags["port"]) == (1, "warning", "0.0.0.0", 31000)


@pytest.mark.parametrize(
    "extra, named",
    [
        (["--tp-size", "2"], "--tp-size=2"),
        (["--tp", "4"], "--tp-size=4"),
        (["--ep-size", "2"], "--ep-size=2"),
        (["--nnodes", "2"], "--nnodes=2"),
        (["--node-rank", "1"], "--node-rank=1"),
        (["--nnodes", "2", "--tp-size", "3", "--dist-init-addr", "h:1"], "--tp-size=3"),
        (["--nnodes", "2", "--tp-size", "2", "--dist-init-addr", "nowhere"], "--dist-init-addr='nowhere'"),
        (["--dtype", "float16"], "--dtype"),
        (["--context-length", "0"], "--context-length=0"),
        (["--port", "70000"], "--port=70000"),
        (["--log-level", "loud"], "--log-level"),
    ],
)
def test_values_the_engine_cannot_honour_exit_naming_the_flag(extra, named, capsys):
    assert named in _fails(["--model-path", "/m", *extra], capsys)


def test_unknown_and_abbreviated_flags_fail(capsys):
    assert "--speculative-algorithm" in _fails(["--model-path", "/m", "--speculative-algorithm", "EAGLE"], capsys)
    # SGLang has no --model; a prefix of --model-path must not pass for it.
    assert "--model" in _fails(["--model", "/m"], capsys)


def test_model_path_is_required(capsys):
    assert "--model-path" in _fails(["--port", "1234"], capsys)


@pytest.mark.parametrize("value", ["two", "0"])
def test_a_bad_omp_num_threads_is_named(value):
    with pytest.raises(SystemExit, match="OMP_NUM_THREADS"):
        engine_config(parse_args(["--model-path", "/m"]), environ={"OMP_NUM_THREADS": value})
