"""`python -m loongsage.inference.embedded` as a real subprocess: serves SGLang's protocol on the
port it was given, reports its launch flags, and stops cleanly on SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import sys

from loongsage.inference.client import EngineClient
from tests.integration.inference.embedded.embedded_cli_support import engine_process

PROMPT = [1, 504, 3458, 314, 253, 1345, 30, 198]


def test_serves_reports_flags_and_stops_on_sigterm(tiny_model_path, tmp_path):
    flags = (
        "--tp-size 1 --mem-fraction-static 0.4 --enable-memory-saver --base-gpu-id 2 --nccl-port 29511 "
        "--context-length 128 --max-running-requests 4 --weight-version v7 --random-seed 5 --disable-cuda-graph "
        "--skip-server-warmup --trust-remote-code --log-level info"
    ).split()
    with engine_process(tiny_model_path, tmp_path / "engine.log", *flags) as engine:
        client = EngineClient(engine.base_url, timeout=60)
        try:
            out = client.generate(
                input_ids=PROMPT, sampling_params={"temperature": 0, "max_new_tokens": 4, "ignore_eos": True}, return_logprob=True
            )
            assert len(out["output_ids"]) == 4 and len(out["meta_info"]["output_token_logprobs"]) == 4
            assert out["meta_info"]["weight_version"] == "v7"
            info = client.get_server_info()
        finally:
            client.close()
        assert info["tp_size"] == 1
        assert (info["mem_fraction_static"], info["enable_memory_saver"], info["base_gpu_id"], info["nccl_port"]) == (
            0.4,
            True,
            2,
            29511,
        )
        assert (info["max_context"], info["max_running"], info["seed"], info["num_threads"]) == (128, 4, 5, 1)
        engine.proc.send_signal(signal.SIGTERM)
        assert engine.proc.wait(timeout=60) == 0, engine.log()
        log = engine.log()
        assert "Traceback" not in log and "SIGTERM received" in log, log


def test_a_model_that_does_not_load_exits_nonzero_with_one_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "loongsage.inference.embedded", "--model-path", str(tmp_path / "absent"), "--port", "1"],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot load model from" in lines[0] and "absent" in lines[0], proc.stderr


def test_sigint_stops_it_cleanly_too(tiny_model_path, tmp_path):
    with engine_process(tiny_model_path, tmp_path / "engine.log") as engine:
        engine.proc.send_signal(signal.SIGINT)
        assert engine.proc.wait(timeout=60) == 0, engine.log()
        assert "Traceback" not in engine.log() and "KeyboardInterrupt" not in engine.log()
