"""trainer.backend=megatron through the real entry point: Hydra, Ray actors for every rank,
the embedded engine fed by weights gathered across tensor-parallel ranks (a mixture of experts
with its experts over two ranks: test_launch_moe.py; fully_async: test_launch_async.py, whose
pipeline does not depend on the trainer backend)."""

from __future__ import annotations

import json

from tests.integration.launch.launch_support import scalars
from tests.integration.launch.test_launch_async import _run

TRAIN_TAGS = ["train/loss", "train/grad_norm", "train/mismatch_k3_kl", "timing/train_s", "timing/weight_sync_s"]


def test_tensor_parallel_sync_run_hands_the_engine_exactly_its_weights(tmp_path):
    run_dir = _run(tmp_path, "tp2", "trainer.backend=megatron", "trainer.megatron.tp=2")
    logged = scalars(run_dir)
    for tag in TRAIN_TAGS:
        assert sorted(logged[tag]) == [1, 2, 3], tag
    # Sync mode, fp32: each step's rollouts were sampled by the weights the trainer then holds, so
    # after a weight sync from two tensor-parallel shards the gap is float noise only.
    assert max(logged["train/mismatch_k3_kl"].values()) < 1e-6
    state = json.loads((run_dir / "checkpoints" / "step_000003" / "trainer" / "trainer_state.json").read_text())
    assert state == {"step": 3, "megatron": {"tp": 2, "pp": 1, "dp": 1}}
