"""An SGLang engine spanning nodes, for real on one machine: the engine's actor runs node rank 0
and starts an SglangNodeActor for node rank 1, each launching the embedded engine's CLI with
SGLang's --nnodes / --node-rank / --dist-init-addr; node rank 0 serves once node rank 1 has
joined it, and a death of either restarts both. (The placement across two Slurm nodes is in
tests/slurm/test_two_nodes.py.)"""

from __future__ import annotations

import os
import re
import signal
import sys

import pytest
import ray

from loongsage.inference.client import EngineClient
from loongsage.inference.engines import engine_actor
from tests.integration.inference.sglang.test_sglang_actor import _gone, _status_when

EMBEDDED = [sys.executable, "-m", "loongsage.inference.embedded"]
STARTUP_TIMEOUT_S = 180.0


@pytest.fixture(scope="module")
def actor_class(ray_runtime):
    return engine_actor("sglang")


def test_an_engine_over_two_nodes_serves_and_restarts_both_node_ranks_together(actor_class, tiny_model_path, tmp_path):
    engine_cfg = {
        "max_running": 4,
        "max_context": 128,
        "num_threads": 1,
        "dtype": "float32",
        "weight_version": "0",
        "sglang": {
            "command": EMBEDDED,
            "log_dir": str(tmp_path),
            "startup_timeout_s": STARTUP_TIMEOUT_S,
            "tp": 2,
            "followers": [{"gpus": None, "ray_options": {"num_cpus": 0}}],
            "max_restarts": 3,
        },
    }
    actor = actor_class.remote(str(tiny_model_path), engine_cfg, None)
    try:
        url = ray.get(actor.start.remote(), timeout=STARTUP_TIMEOUT_S + 30)
        first = ray.get(actor.status.remote())
        assert first["alive"] and len(first["node_pids"]) == 1
        head_log, node_log = (tmp_path / "engine-0.log").read_text(), (tmp_path / "engine-0-node1.log").read_text()
        addr = re.search(r"--dist-init-addr (\S+)", head_log).group(1)
        assert "--nnodes 2 --node-rank 0" in head_log and "--tp-size 2" in head_log
        assert "--nnodes 2 --node-rank 1" in node_log and f"--dist-init-addr {addr}" in node_log
        assert "node rank 1 of 2 joined node rank 0" in node_log  # node rank 0 served only after this
        client = EngineClient(url, timeout=60)
        answer = client.generate(input_ids=[1, 2, 3], sampling_params={"max_new_tokens": 3, "temperature": 0.0})
        assert len(answer["output_ids"]) == 3

        # node rank 1 dies: both restart (one death of the engine), and it serves again
        os.kill(first["node_pids"][0], signal.SIGKILL)
        second = _status_when(actor, lambda s: s["restarts"] == 1 and s["alive"])
        assert second["alive"] and second["restarts"] == 1, second
        assert _gone(first["pid"]) and second["pid"] != first["pid"] and second["node_pids"] != first["node_pids"]
        assert client.generate(input_ids=[1, 2, 3], sampling_params={"max_new_tokens": 2})["output_ids"]

        # node rank 0 dies: node rank 1 ends with it (its rendezvous is gone) and both restart
        os.kill(second["pid"], signal.SIGKILL)
        third = _status_when(actor, lambda s: s["restarts"] == 2 and s["alive"])
        assert third["alive"] and third["restarts"] == 2, third
        assert _gone(second["node_pids"][0])

        ray.get(actor.stop.remote(), timeout=60)
        assert _gone(third["pid"]) and _gone(third["node_pids"][0])
    finally:
        ray.kill(actor)
