"""The Megatron trainer over real gloo groups: every layout takes the step the single rank
takes (and the HF backend takes), and a checkpoint resumes to exactly the next step."""

from __future__ import annotations

import shutil
import warnings
from functools import partial

import pytest
import torch

from loongsage.config.schema import AlgorithmConfig, MegatronConfig, TrainerConfig
from loongsage.sample import Sample
from tests.integration.training.megatron.megatron_workers import hf_gradients, run_ranks
from tests.samples import random_samples

SAMPLES = random_samples(8, seed=3, partial_mask=True)
ALGO = AlgorithmConfig(entropy_coef=0.01)
# Compared before clipping: a clip would rescale every gradient by the (equal) norms' ratio.
UNCLIPPED = 1e9
METRICS_COMPARED = ("train/loss", "train/pg_loss", "train/entropy", "train/grad_norm", "train/mismatch_k3_kl", "train/tokens")


def trainer(tp: int = 1, dp: int = 1, pp: int = 1, distributed_optimizer: bool = False, **kw) -> TrainerConfig:
    settings = dict(micro_batch_size=2, mini_batches=1, lr=1e-3, max_grad_norm=UNCLIPPED, num_threads=1) | kw
    layout = MegatronConfig(tp=tp, pp=pp, dp=dp, distributed_optimizer=distributed_optimizer)
    return TrainerConfig(backend="megatron", megatron=layout, **settings)


def my_shard(worker, samples: list[Sample]) -> list[Sample]:
    size = len(samples) // worker.layout.dp_size
    return samples[worker.data_rank() * size : (worker.data_rank() + 1) * size]


def one_step(worker) -> dict:
    """One optimizer step over two accumulated micro-batches per data-parallel rank."""
    shard = my_shard(worker, SAMPLES)
    metrics = worker.train_step(shard)
    return {"metrics": metrics, "grads": hf_gradients(worker), "logprobs": worker.compute_logprobs(shard)}


@pytest.fixture(scope="module")
def single_rank(tiny_model_path, tmp_path_factory):
    return run_ranks(tiny_model_path, trainer(), one_step, tmp_path_factory.mktemp("tp1"), ALGO)[0]


@pytest.mark.parametrize("layout", [dict(tp=2), dict(dp=2), dict(dp=2, distributed_optimizer=True)], ids=str)
def test_every_layout_takes_the_single_rank_step(layout, single_rank, tiny_model_path, tmp_path):
    ranks = run_ranks(tiny_model_path, trainer(**layout), one_step, tmp_path, ALGO)
    for result in ranks:  # every rank reports the global metrics
        for key in METRICS_COMPARED:
            assert result["metrics"][key] == pytest.approx(single_rank["metrics"][key], rel=1e-5, abs=1e-7), key
    if not layout.get("distributed_optimizer"):  # its buffers hold only each rank's reduced shard
        grads = ranks[0]["grads"]
        assert grads.keys() == single_rank["grads"].keys()
        for name, expected in single_rank["grads"].items():
            scale = expected.abs().max().item()
            torch.testing.assert_close(grads[name], expected, rtol=1e-5, atol=1e-6 * scale, msg=name)
    # After the step: the weights moved alike (logprobs of each rank's own samples).
    after = [lp for result in ranks[:: layout.get("tp", 1)] for lp in result["logprobs"]]
    expected_after = single_rank["logprobs"]
    assert len(after) == len(expected_after)
    for got, expected in zip(after, expected_after):
        assert got == pytest.approx(expected, abs=1e-5)


def hf_step(model_path, algo: AlgorithmConfig) -> dict:
    """The HF backend's metrics for one step on SAMPLES, in one rank."""
    from loongsage.training.fsdp import TrainWorker

    hf = TrainWorker(model_path, TrainerConfig(micro_batch_size=2, lr=1e-3, max_grad_norm=UNCLIPPED), algo, 0, 0)
    hf.setup(*hf.rendezvous_address())
    try:
        return hf.train_step(SAMPLES)
    finally:
        hf.close()


def test_single_rank_step_equals_the_hf_backend(single_rank, tiny_model_path):
    metrics = hf_step(tiny_model_path, ALGO)
    for key in METRICS_COMPARED:
        assert single_rank["metrics"][key] == pytest.approx(metrics[key], rel=1e-5, abs=1e-7), key


FIRST, SECOND = SAMPLES[:4], SAMPLES[4:]


def two_steps_saving_between(checkpoint: str, worker) -> dict:
    worker.train_step(my_shard(worker, FIRST))
    worker.save_checkpoint(checkpoint)
    return {"second": worker.train_step(my_shard(worker, SECOND)), "after": worker.compute_logprobs(SECOND)}


def resumed_step(checkpoint: str, worker) -> dict:
    """Load, then the second step; the log-probs before it (the weights) and after it (what
    the optimizer state did to them)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        step = worker.load_checkpoint(checkpoint)
    before = worker.compute_logprobs(SECOND)
    second = worker.train_step(my_shard(worker, SECOND))
    after = worker.compute_logprobs(SECOND)
    return {"step": step, "before": before, "second": second, "after": after, "warnings": [str(w.message) for w in caught]}


def assert_same_step(resumed: dict, uninterrupted: dict, tol: float = 1e-5) -> None:
    for key in METRICS_COMPARED:
        assert resumed["second"][key] == pytest.approx(uninterrupted["second"][key], rel=tol, abs=1e-7), key
    for got, expected in zip(resumed["after"], uninterrupted["after"], strict=True):
        assert got == pytest.approx(expected, abs=tol)


def max_logprob_gap(a: list[list[float]], b: list[list[float]]) -> float:
    return max(abs(x - y) for row_a, row_b in zip(a, b, strict=True) for x, y in zip(row_a, row_b, strict=True))


def test_resume_gives_the_same_next_step_and_exports_an_hf_model(tiny_model_path, tmp_path):
    checkpoint = str(tmp_path / "ckpt")
    layout = trainer(tp=2, warmup_steps=3)  # the lr schedule's position is part of the state
    uninterrupted = run_ranks(tiny_model_path, layout, partial(two_steps_saving_between, checkpoint), tmp_path / "a", ALGO)[0]
    resumed = run_ranks(tiny_model_path, layout, partial(resumed_step, checkpoint), tmp_path / "b", ALGO)[0]
    assert resumed["step"] == 1 and resumed["warnings"] == []
    assert resumed["second"] == uninterrupted["second"]  # bit for bit: weights, Adam moments, lr step
    assert resumed["after"] == uninterrupted["after"]

    # Another tensor-parallel size reads the same distributed checkpoint: weights and Adam's
    # moments resharded, the step the uninterrupted run took to float rounding.
    other = run_ranks(tiny_model_path, trainer(warmup_steps=3), partial(resumed_step, checkpoint), tmp_path / "c", ALGO)[0]
    assert other["step"] == 1
    assert_same_step(other, uninterrupted)
    assert len(other["warnings"]) == 1
    assert "model and optimizer restored; the per-rank RNG streams start afresh" in other["warnings"][0]

    # The export is an HF model directory transformers loads as it stands.
    from transformers import AutoModelForCausalLM

    from loongsage.algorithms.losses import token_logprobs
    from loongsage.training.batch import pack_samples

    hf = AutoModelForCausalLM.from_pretrained(tmp_path / "ckpt", dtype=torch.float32).eval()
    batch = pack_samples(SECOND)
    with torch.no_grad():
        logits = hf(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[:, batch.first_column : -1]
    hf_logprobs = batch.response_values(token_logprobs(logits, batch.targets))
    for got_tp1, got_hf in zip(other["before"], hf_logprobs, strict=True):
        assert got_tp1 == pytest.approx(got_hf, abs=1e-4)


def test_resume_across_optimizer_kinds_restores_the_optimizer(tiny_model_path, tmp_path):
    """Saved by two data-parallel ranks with the distributed optimizer, resumed by one rank with
    megatron's plain optimizer: Adam's moments come back, which the HF export alone lacks."""
    checkpoint = tmp_path / "ckpt"
    sharded, one_rank = trainer(dp=2, distributed_optimizer=True, warmup_steps=3), trainer(warmup_steps=3)
    saving = partial(two_steps_saving_between, str(checkpoint))
    uninterrupted = run_ranks(tiny_model_path, sharded, saving, tmp_path / "a", ALGO)[0]
    resumed = run_ranks(tiny_model_path, one_rank, partial(resumed_step, str(checkpoint)), tmp_path / "b", ALGO)[0]
    assert resumed["step"] == 1
    assert_same_step(resumed, uninterrupted)

    # Without its megatron part the checkpoint falls back to the HF export: the same weights,
    # so the same step's metrics, but a fresh Adam moves them elsewhere, and it says so.
    export_only = tmp_path / "export_only"
    shutil.copytree(checkpoint, export_only, ignore=shutil.ignore_patterns("megatron"))
    fresh = run_ranks(tiny_model_path, one_rank, partial(resumed_step, str(export_only)), tmp_path / "c", ALGO)[0]
    assert any("optimizer and RNG state start afresh" in w for w in fresh["warnings"])
    assert max_logprob_gap(fresh["before"], resumed["before"]) < 1e-5
    assert fresh["second"]["train/loss"] == pytest.approx(uninterrupted["second"]["train/loss"], rel=1e-5)
    assert max_logprob_gap(fresh["after"], uninterrupted["after"]) > 1e-3
    assert max_logprob_gap(resumed["after"], uninterrupted["after"]) < 1e-5


def test_pipeline_stages_take_the_single_rank_step(single_rank, tiny_model_path, tmp_path):
    ranks = run_ranks(tiny_model_path, trainer(pp=2), one_step, tmp_path, ALGO)
    for result in ranks:  # the first stage reports what the last one computed
        for key in METRICS_COMPARED:
            assert result["metrics"][key] == pytest.approx(single_rank["metrics"][key], rel=1e-5, abs=1e-7), key
        for got, expected in zip(result["logprobs"], single_rank["logprobs"]):
            assert got == pytest.approx(expected, abs=1e-5)
    for name, expected in single_rank["grads"].items():
        scale = expected.abs().max().item()
        torch.testing.assert_close(ranks[0]["grads"][name], expected, rtol=1e-5, atol=1e-6 * scale, msg=name)


def test_m2po_cuts_once_over_every_data_parallel_rank(tiny_model_path, tmp_path):
    """The cutoff is the whole batch's: two data-parallel ranks mask what the HF backend masks on
    all of it in one rank (per-rank cutoffs would mask otherwise: the ranks' log-ratios differ)."""
    algo = AlgorithmConfig(stale_filter="m2po", stale_threshold=0.02)
    expected = hf_step(tiny_model_path, algo)
    assert 0.0 < expected["train/stale_filtered_frac"] < 1.0
    for result in run_ranks(tiny_model_path, trainer(dp=2), one_step, tmp_path, algo):
        for key in (*METRICS_COMPARED, "train/stale_filtered_frac"):
            assert result["metrics"][key] == pytest.approx(expected[key], rel=1e-5, abs=1e-7), key
