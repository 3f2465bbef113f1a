"""TrainGroup over real Ray actors and a real gloo process group, on the tiny model."""

from __future__ import annotations

import os
import signal
from types import SimpleNamespace

import psutil
import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from loongsage.controller.stopping import still_running
from loongsage.sample import Sample
from loongsage.training import TrainerError, TrainGroup
from tests.samples import random_samples as _random_samples

LR = 1e-3  # large enough that one Adam step moves every weight by ~LR


def random_samples(n: int, seed: int) -> list[Sample]:
    return _random_samples(n, seed, max_response=10)


BATCHES = [random_samples(8, seed) for seed in range(3)]


def trainer(world_size: int, **overrides) -> SimpleNamespace:
    return SimpleNamespace(**{"world_size": world_size, "micro_batch_size": 2, "lr": LR, **overrides})


def weights_of(checkpoint_dir) -> dict[str, torch.Tensor]:
    return load_file(os.path.join(checkpoint_dir, "model.safetensors"))


@pytest.fixture(scope="module")
def ddp_run(ray_runtime, tiny_model_path, tmp_path_factory):
    """2-rank DDP: 3 steps, a checkpoint after each."""
    root = tmp_path_factory.mktemp("ddp")
    group = TrainGroup(tiny_model_path, trainer(2), SimpleNamespace(), seed=0)
    metrics = []
    for step, batch in enumerate(BATCHES, start=1):
        metrics.append(group.train_step(batch))
        group.save_checkpoint(root / f"step{step}")
    group.shutdown()
    return SimpleNamespace(root=root, metrics=metrics)


def test_metrics_and_checkpoint_is_an_hf_model_dir(ddp_run, tiny_model_path):
    assert set(ddp_run.metrics[0]) == {
        "train/loss",
        "train/pg_loss",
        "train/grad_norm",
        "train/mismatch_k3_kl",
        "train/entropy",
        "train/clip_frac",
        "train/lr",
        "train/tokens",
    }
    assert ddp_run.metrics[0]["train/tokens"] == sum(len(s.response_ids) for s in BATCHES[0])
    model = AutoModelForCausalLM.from_pretrained(ddp_run.root / "step3")
    assert sum(p.numel() for p in model.parameters()) > 0
    leftovers = [p.name for p in ddp_run.root.iterdir() if p.name.startswith(".")]
    assert leftovers == [], "atomic save left scratch directories behind"


def test_two_ranks_update_like_one_rank(ddp_run, tiny_model_path, tmp_path):
    group = TrainGroup(tiny_model_path, trainer(1, micro_batch_size=4), SimpleNamespace(), seed=0)
    metrics = group.train_step(BATCHES[0])
    group.save_checkpoint(tmp_path / "one_rank")
    group.shutdown()

    assert metrics["train/grad_norm"] == pytest.approx(ddp_run.metrics[0]["train/grad_norm"], rel=1e-5)
    assert metrics["train/loss"] == pytest.approx(ddp_run.metrics[0]["train/loss"], abs=1e-6)
    initial = load_file(os.path.join(tiny_model_path, "model.safetensors"))
    two_ranks = weights_of(ddp_run.root / "step1")
    for name, tensor in weights_of(tmp_path / "one_rank").items():
        assert not torch.equal(tensor, initial[name]), f"{name} did not move"
        torch.testing.assert_close(tensor, two_ranks[name], rtol=0, atol=1e-5, msg=name)


def test_fsdp2_trains_saves_and_resumes_like_ddp(ddp_run, tiny_model_path, tmp_path):
    group = TrainGroup(tiny_model_path, trainer(2, strategy="fsdp2"), SimpleNamespace(), seed=0)
    metrics = group.train_step(BATCHES[0])
    group.save_checkpoint(tmp_path / "step1")
    group.load_checkpoint(ddp_run.root / "step2")  # a DDP checkpoint: full, unsharded state
    group.train_step(BATCHES[2])
    group.save_checkpoint(tmp_path / "step3")
    group.shutdown()

    assert metrics["train/grad_norm"] == pytest.approx(ddp_run.metrics[0]["train/grad_norm"], rel=1e-5)
    for step in ("step1", "step3"):
        ddp = weights_of(ddp_run.root / step)
        for name, tensor in weights_of(tmp_path / step).items():
            torch.testing.assert_close(tensor, ddp[name], rtol=0, atol=1e-5, msg=f"{step} {name}")


def assert_same_weights(checkpoint_dir, expected_dir) -> None:
    weights, expected = weights_of(checkpoint_dir), weights_of(expected_dir)
    assert weights.keys() == expected.keys()
    for name, tensor in weights.items():
        assert torch.equal(tensor, expected[name]), name


def test_resume_is_bit_exact_and_a_killed_worker_raises(ddp_run, tiny_model_path, tmp_path):
    group = TrainGroup(tiny_model_path, trainer(2), SimpleNamespace(), seed=0, spares=True)
    assert group.pids == [ray_pid(worker) for worker in group.workers]
    assert group.spares == []  # started by the driver once a step is done
    group.load_checkpoint(ddp_run.root / "step2")
    assert group.step == 2
    group.train_step(BATCHES[2])
    group.save_checkpoint(tmp_path / "resumed")

    assert_same_weights(tmp_path / "resumed", ddp_run.root / "step3")
    optimizer_a = torch.load(ddp_run.root / "step3" / "optimizer.pt")
    optimizer_b = torch.load(tmp_path / "resumed" / "optimizer.pt")
    for name, state in optimizer_b["state"].items():
        for key, value in state.items():
            assert torch.equal(value, optimizer_a["state"][name][key]), (name, key)

    group.start_spares()

    # Rank 1 crashes; rank 0 enters the step and blocks in a collective waiting for it.
    pid = ray_pid(group.workers[1])
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(TrainerError, match="rank 1 died during train_step at trainer step 3"):
        group.train_step(BATCHES[0])
    with pytest.raises(TrainerError, match="unusable"):
        group.compute_logprobs(BATCHES[0])

    # The group that replaces it runs in the spares, started before the death, and resumes as exactly.
    spares = group.take_spares()
    spare_pids = [ray_pid(spare) for spare in spares]
    assert set(spare_pids).isdisjoint(group.pids) and len(spare_pids) == 2
    replacement = TrainGroup(tiny_model_path, trainer(2), SimpleNamespace(), seed=0, spares=True, adopt=spares)
    assert replacement.pids == spare_pids
    replacement.load_checkpoint(ddp_run.root / "step2")
    replacement.train_step(BATCHES[2])
    replacement.save_checkpoint(tmp_path / "from_spares")
    assert_same_weights(tmp_path / "from_spares", ddp_run.root / "step3")
    replacement.start_spares()
    next_spares = [ray_pid(spare) for spare in replacement.spares]
    replacement.shutdown()
    assert running_after([*spare_pids, *next_spares], wait_s=10) == []


def test_a_spare_that_died_is_replaced_by_a_new_process(ray_runtime, tiny_model_path):
    group = TrainGroup(tiny_model_path, trainer(2), SimpleNamespace(), seed=0, spares=True)
    group.start_spares()
    spares = group.take_spares()
    group.shutdown()
    os.kill(ray_pid(spares[1]), signal.SIGKILL)
    replacement = TrainGroup(tiny_model_path, trainer(2), SimpleNamespace(), seed=0, adopt=spares)
    assert replacement.spares == []
    assert replacement.train_step(BATCHES[0])["train/tokens"] == sum(len(s.response_ids) for s in BATCHES[0])
    replacement.shutdown()


def running_after(pids: list[int], wait_s: float) -> list[int]:
    """Those of `pids` still running after up to `wait_s`: ray.kill returns at once."""
    processes = []
    for pid in pids:
        try:
            processes.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            pass
    return [process.pid for process in still_running(processes, wait_s)]


def ray_pid(actor) -> int:
    import ray

    return ray.get(actor.__ray_call__.remote(lambda self: os.getpid()))
