"""Routing replay (R3): the trainer's mismatch with the engine, without and with replay, in one run.

    python -m loongsage.bench routing [--model tiny-moe] [--backend fsdp] [--prompts 16]
                                      [--response-len 32] [--perturb 0.02] [--engine-dtype float32]

The embedded engine serves the MoE model with its routers perturbed by a fixed small amount
(`--perturb`: Gaussian noise of that fraction of each router's own spread; 0 with
`--engine-dtype bfloat16` measures a bf16 engine against the fp32 trainer instead), samples
responses and returns their routing (return_routed_experts). Two trainers on the unperturbed
weights then take the same samples, one routing by itself and one replaying the engine's
routing (algorithm.routing_replay); each reports, from its training forward, what TensorBoard
shows: train/routing_mismatch (token x layer top-k sets routed otherwise than the engine) and
train/mismatch_k3_kl (the K3 divergence of its log-probs from the engine's). Printed: both, and
how many times lower the K3 is with replay. Not a timing: one run is the measurement.
"""

from __future__ import annotations

import argparse
import asyncio
import random

import torch

from loongsage.config.schema import AlgorithmConfig, TrainerConfig
from loongsage.inference.embedded.engine import Engine
from loongsage.inference.embedded.weights import apply_named_tensors
from loongsage.inference.resumable import Generation, generate_resumable
from loongsage.models import is_mixture_of_experts, resolve_model_path
from loongsage.sample import Sample
from loongsage.training.backends import TRAIN_BACKENDS

SEED = 0


def main(argv: list[str]) -> int:
    args = _parse(argv)
    torch.set_num_threads(args.threads or torch.get_num_threads())
    model_path = resolve_model_path(args.model)
    if not is_mixture_of_experts(model_path):
        print(f"--model {args.model}: routing replay needs a mixture-of-experts model (tiny-moe, smollm2-moe)")
        return 2
    samples = _engine_samples(model_path, args)
    tokens = sum(len(s.response_ids) for s in samples)
    print(
        f"model={args.model} backend={args.backend} engine: {args.engine_dtype}, routers perturbed by {args.perturb:g}; "
        f"trainer: float32; {len(samples)} samples, {tokens} response tokens"
    )
    results = {}
    for replay in (False, True):
        metrics = _first_step_metrics(model_path, samples, args, replay)
        results[replay] = metrics
        print(
            f"  {'with' if replay else 'without'} replay: train/routing_mismatch={metrics['train/routing_mismatch']:.4f} "
            f"train/mismatch_k3_kl={metrics['train/mismatch_k3_kl']:.3e}"
        )
    ratio = results[False]["train/mismatch_k3_kl"] / max(results[True]["train/mismatch_k3_kl"], 1e-30)
    print(f"mismatch K3 without / with replay: {ratio:.1f}x")
    return 0


def _engine_samples(model_path, args: argparse.Namespace) -> list[Sample]:
    engine = Engine(model_path, {"dtype": args.engine_dtype, "return_routed_experts": True, "max_running": args.prompts})
    try:
        _perturb_routers(engine, args.perturb)
        rng = random.Random(SEED)
        vocab = engine.model.cfg.vocab_size
        prompts = [[rng.randrange(vocab) for _ in range(args.prompt_len)] for _ in range(args.prompts)]
        generations = asyncio.run(_generate_all(engine, prompts, args.response_len))
    finally:
        engine.stop()
    return [
        Sample(
            prompt_ids=prompt,
            response_ids=g.output_ids,
            response_logprobs=g.logprobs,
            loss_mask=[1] * len(g.output_ids),
            routed_experts=g.routed_experts,
            advantage=1.0,
        )
        for prompt, g in zip(prompts, generations)
    ]


async def _generate_all(engine: Engine, prompts: list[list[int]], length: int) -> list[Generation]:
    async def call(input_ids: list[int], params: dict, rid: str) -> dict:
        body = {"input_ids": input_ids, "sampling_params": params, "return_logprob": True, "return_routed_experts": True}
        return await engine.generate(body)

    params = {"temperature": 1.0, "ignore_eos": True}
    return await asyncio.gather(
        *(generate_resumable(call, p, {**params, "sampling_seed": SEED + i}, length, 0) for i, p in enumerate(prompts))
    )


def _perturb_routers(engine: Engine, fraction: float) -> None:
    if not fraction:
        return
    generator = torch.Generator().manual_seed(SEED)
    perturbed = []
    for name, param in engine.model.named_parameters():
        if name.endswith("mlp.gate.weight"):
            noise = torch.randn(param.shape, generator=generator, dtype=torch.float32) * float(param.float().std()) * fraction
            perturbed.append((name, param.float() + noise))
    apply_named_tensors(engine.model, perturbed)


def _first_step_metrics(model_path, samples: list[Sample], args: argparse.Namespace, replay: bool) -> dict[str, float]:
    """The metrics of one train step, all measured in its forward, before the update."""
    settings = TrainerConfig(backend=args.backend, micro_batch_size=args.prompts, num_threads=torch.get_num_threads())
    algo = AlgorithmConfig(routing_replay=replay)
    worker = TRAIN_BACKENDS.get(args.backend)(str(model_path), settings, algo, seed=SEED, rank=0)
    worker.setup(*worker.rendezvous_address())
    try:
        return worker.train_step(samples)
    finally:
        worker.close()


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m loongsage.bench routing", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="tiny-moe")
    parser.add_argument("--backend", default="fsdp", choices=sorted(TRAIN_BACKENDS))
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--prompt-len", type=int, default=16)
    parser.add_argument("--response-len", type=int, default=32)
    parser.add_argument("--perturb", type=float, default=0.02, help="router noise, as a fraction of each router's spread")
    parser.add_argument("--engine-dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--threads", type=int, default=None)
    return parser.parse_args(argv)
