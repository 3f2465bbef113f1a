"""The Megatron trainer on a mixture of experts over real gloo groups: at ep=2 (each rank holds
half the experts and they exchange tokens) a step is the single rank's step, a checkpoint
written at one expert-parallel size resumes at another, and the engine's routing is compared and
replayed (R3) as the fsdp backend does."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import pytest
import torch

from loongsage.config.schema import MoeConfig, TrainerConfig
from tests.integration.training.megatron.megatron_workers import hf_gradients, run_ranks
from tests.integration.training.megatron.test_megatron_trainer import (
    ALGO,
    METRICS_COMPARED,
    SAMPLES,
    UNCLIPPED,
    assert_same_step,
    my_shard,
    resumed_step,
    trainer,
    two_steps_saving_between,
)
from tests.routing_samples import engine_routing, shifted, with_routing

RELATIVE = 1e-5


def moe_trainer(ep: int = 1, dp: int = 1, moe: MoeConfig | None = None, **kw):
    layout = trainer(dp=dp, **kw)
    layout.megatron.ep = ep
    layout.moe = moe or MoeConfig()
    return layout


def weights_around_a_step(worker) -> dict:
    from loongsage.training.megatron.convert import hf_weights

    before = {name: tensor.clone() for name, tensor in hf_weights(worker.model.module, worker.spec)}
    worker.train_step(my_shard(worker, SAMPLES))
    after = dict(hf_weights(worker.model.module, worker.spec))
    return {"before": before, "after": after, "aux_loss_coeff": worker.model.module.config.moe_aux_loss_coeff}


def one_step(worker) -> dict:
    """One optimizer step over two accumulated micro-batches per data-parallel rank; the
    gradients before the step (the optimizer does not touch megatron's grad buffers)."""
    shard = my_shard(worker, SAMPLES)
    metrics = worker.train_step(shard)
    return {"metrics": metrics, "grads": hf_gradients(worker), "logprobs": worker.compute_logprobs(shard)}


@pytest.fixture(scope="module")
def tiny_moe_path() -> str:
    from loongsage.models.tiny import tiny_moe_dir

    return str(tiny_moe_dir())


@pytest.mark.parametrize("layout", [dict(ep=2, dp=2), dict(tp=2, ep=2)], ids=["ep2-dp2", "tp2-ep2"])
def test_expert_parallel_step_is_the_single_rank_step(layout, tiny_moe_path, tmp_path):
    """At tp=2 the ranks run sequence-parallel: each routes half of every sequence's tokens."""
    single = run_ranks(tiny_moe_path, moe_trainer(), one_step, tmp_path / "ep1", ALGO)[0]
    ranks = run_ranks(tiny_moe_path, moe_trainer(**layout), one_step, tmp_path / "parallel", ALGO)
    for result in ranks:
        for key in METRICS_COMPARED:
            assert result["metrics"][key] == pytest.approx(single["metrics"][key], rel=RELATIVE, abs=1e-7), key
    grads = ranks[0]["grads"]
    assert grads.keys() == single["grads"].keys()
    assert any(".mlp.experts.3." in name for name in grads)  # an expert only rank 1 holds
    worst = 0.0
    for name, expected in single["grads"].items():
        scale = expected.abs().max().item()
        assert scale > 0, f"{name} has no gradient"  # routers too (top-k weights, load-balancing loss)
        worst = max(worst, (grads[name] - expected).abs().max().item() / scale)
        torch.testing.assert_close(grads[name], expected, rtol=RELATIVE, atol=RELATIVE * scale, msg=name)
    print(f"{layout} vs one rank: largest gradient difference {worst:.3g} of the tensor's largest entry")
    data_shards = ranks[:: layout.get("tp", 1)]  # tensor-parallel ranks are adjacent and share a shard
    after = [lp for result in data_shards for lp in result["logprobs"]]
    for got, expected in zip(after, single["logprobs"], strict=True):
        assert got == pytest.approx(expected, abs=1e-5)


def test_a_checkpoint_resumes_at_another_expert_parallel_size(tiny_moe_path, tmp_path):
    """The experts are stored under global keys (megatron's sharded state dict), so each ep rank
    reads its own; the optimizer is one at ep=1 and two chained (dense, experts) at ep=2. Saved
    at ep=1, resumed at ep=2 (the other direction takes the same code path; it passed when
    written and is left out of CI for time)."""
    saved_at, resumed_at = 1, 2
    checkpoint = str(tmp_path / "ckpt")
    saving = partial(two_steps_saving_between, checkpoint)
    saver = moe_trainer(ep=saved_at, dp=saved_at, warmup_steps=3)
    uninterrupted = run_ranks(tiny_moe_path, saver, saving, tmp_path / "a", ALGO)[0]
    resumer = moe_trainer(ep=resumed_at, dp=resumed_at, warmup_steps=3)
    resumed = run_ranks(tiny_moe_path, resumer, partial(resumed_step, checkpoint), tmp_path / "b", ALGO)
    for result in resumed:
        assert result["step"] == 1
        assert any("per-rank RNG streams start afresh" in w for w in result["warnings"]) == (result is resumed[0])
    assert_same_step(resumed[0], uninterrupted)


def test_router_settings_a_user_tunes(tiny_moe_path, tmp_path):
    """trainer.moe.freeze_router keeps every router as loaded while the rest trains;
    trainer.moe.aux_loss_coeff replaces the checkpoint's router_aux_loss_coef."""
    settings = MoeConfig(aux_loss_coeff=0.5, freeze_router=True)
    got = run_ranks(tiny_moe_path, moe_trainer(moe=settings), weights_around_a_step, tmp_path, ALGO)[0]
    assert got["aux_loss_coeff"] == 0.5
    routers = [name for name in got["before"] if name.endswith(".mlp.gate.weight")]
    assert len(routers) == 2
    for name, before in got["before"].items():
        moved = not torch.equal(got["after"][name], before)
        assert moved == (name not in routers), name


@pytest.mark.parametrize(
    ("model", "settings", "algo", "message"),
    [
        ("tiny", dict(moe=MoeConfig(freeze_router=True)), ALGO, r"trainer.moe.freeze_router=true: the model \(llama\)"),
        ("tiny", dict(moe=MoeConfig(aux_loss_coeff=0.1)), ALGO, r"trainer.moe.aux_loss_coeff=0.1: the model \(llama\)"),
    ],
    ids=["freeze-router-dense", "aux-loss-dense"],
)
def test_settings_the_worker_cannot_honour_are_refused_by_name(model, settings, algo, message, tiny_moe_path, tiny_model_path):
    from loongsage.training.megatron.worker import MegatronWorker

    path = tiny_moe_path if model == "tiny-moe" else tiny_model_path
    worker = MegatronWorker(path, moe_trainer(**settings), algo, seed=0, rank=0)
    with pytest.raises(ValueError, match=message):
        worker.setup("127.0.0.1", 1)  # refused before it waits for any other rank


def logprobs_then_step(samples, worker) -> dict:
    return {"logprobs": worker.compute_logprobs(samples), "metrics": worker.train_step(samples)}


def test_a_sequence_parallel_step_is_the_fsdp_backends_step_replaying_the_engines_routing(tiny_moe_path, tmp_path):
    """The same weights, samples and objective, and an engine routing that differs from the
    trainers' on every third position: megatron at tp=2 (sequence-parallel: each rank routes,
    replays and counts half of every sequence) with its experts over the two ranks, and the fsdp
    backend's transformers model, both replaying it, compute the same log-probs before the step,
    count the same routing mismatch and take the same step, both adding their routers'
    load-balancing loss (at a coefficient large enough to move the step: 0.5)."""
    from loongsage.training.fsdp import TrainWorker

    engine, fraction = shifted(engine_routing(tiny_moe_path, SAMPLES), every=3, experts=4)
    samples = with_routing(SAMPLES, engine)
    algo = replace(ALGO, routing_replay=True)
    balancing = MoeConfig(aux_loss_coeff=0.5)
    layout = moe_trainer(tp=2, ep=2, moe=balancing)
    ranks = run_ranks(tiny_moe_path, layout, partial(_replayed_step, samples), tmp_path, algo)
    fsdp_layout = TrainerConfig(micro_batch_size=2, lr=1e-3, max_grad_norm=UNCLIPPED, moe=balancing)
    fsdp = TrainWorker(tiny_moe_path, fsdp_layout, algo, 0, 0)
    fsdp.setup(*fsdp.rendezvous_address())
    try:
        expected = _replayed_step(samples, fsdp, shard=False)
    finally:
        fsdp.close()
    # Log-probs near -11 in float32, after a step whose gradients were reduced in another order
    # (sequence-parallel halves, experts over two ranks): 1.1e-5 apart on CI's CPU.
    for when in ("before", "after"):
        for result in ranks:  # both ranks hold the whole batch
            for row, want in zip(result[when], expected[when], strict=True):
                assert row == pytest.approx(want, abs=2e-5), when
    # With replay the trainer's own choice is made on the replayed forward: beyond the changed
    # positions, a later layer may choose otherwise where an earlier one was replayed.
    mismatch = expected["metrics"]["train/routing_mismatch"]
    assert mismatch >= fraction
    for result in ranks:
        assert result["metrics"]["train/routing_mismatch"] == pytest.approx(mismatch)
        for key in METRICS_COMPARED:
            assert result["metrics"][key] == pytest.approx(expected["metrics"][key], rel=RELATIVE, abs=1e-7), key


def _replayed_step(samples, worker, shard: bool = True) -> dict:
    mine = my_shard(worker, samples) if shard else samples
    before = worker.compute_logprobs(mine)
    return {"before": before, "metrics": worker.train_step(mine), "after": worker.compute_logprobs(mine)}
