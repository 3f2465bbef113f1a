"""Trainer step vs a plain HF forward/backward + AdamW loop, tokens/s on the same batch.

    python -m loongsage.bench train [--backend fsdp|megatron] [--model smollm2-135m] [--samples 4]
                                    [--prompt-len 32] [--response-len 64] [--micro-batch-size 2]
                                    [--steps 3] [--repeats 5]

Ours is one rank of the `--backend` trainer (fsdp: world_size 1, the default DDP strategy;
megatron: tp = pp = dp = 1, megatron's DDP, optimizer and schedule) doing full train steps:
PPO-clip loss, entropy and mismatch-KL metrics, gradient accumulation over micro-batches,
grad clipping and AdamW. The baseline is what a user would write by hand: HF's own
causal-LM loss on the response tokens, the same micro-batches, grad clipping and
torch.optim.AdamW. Both are built and take one untimed step (first-touch allocations,
optimizer state) before anything is timed; then runs of `--steps` steps alternate (plain
loop, ours, plain loop, ...; `--repeats` pairs), so load from elsewhere on the machine hits
both alike, and each side keeps its model and optimizer between runs, as a training job
does. Tokens counted: all non-padding tokens of the batch, per step.

One step takes about 3 s here and single steps' ratios ranged 0.96x-1.20x on a quiet machine,
so one pair says little: the defaults time 5 pairs of 3-step runs (about 2 minutes).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import torch

from loongsage.bench.repeat import add_repeats_argument, interleaved, pair_ratios, ratio_line, runs_note
from loongsage.config.schema import AlgorithmConfig, TrainerConfig
from loongsage.models import load_causal_lm, resolve_model_path
from loongsage.sample import Sample
from loongsage.training.backends import TRAIN_BACKENDS
from loongsage.training.batch import PackedBatch, pack_samples, split_micro_batches

LR = 1e-6


def main(argv: list[str]) -> int:
    args = _parse(argv)
    torch.set_num_threads(args.threads or torch.get_num_threads())
    model_path = resolve_model_path(args.model)
    samples = _samples(args)
    tokens = sum(sample.num_tokens for sample in samples)
    print(
        f"backend={args.backend} model={args.model} samples={args.samples} tokens/step={tokens} "
        f"micro_batch_size={args.micro_batch_size} threads={torch.get_num_threads()} "
        f"runs of {args.steps} steps, {args.repeats} each side"
    )

    ours = _trainer(model_path, args)
    baseline = _PlainLoop(model_path, samples, args.micro_batch_size)
    try:
        ours.train_step(samples)  # warm-up: first-touch allocations, optimizer state
        baseline.step()
        baseline_s, ours_s = interleaved(
            lambda _: _timed(baseline.step, args.steps),
            lambda _: _timed(lambda: ours.train_step(samples), args.steps),
            args.repeats,
        )
    finally:
        ours.close()

    _report("loongsage trainer", ours_s, tokens)
    _report("plain HF loop", baseline_s, tokens)
    print(ratio_line("trainer / plain HF tokens/s", pair_ratios(baseline_s, ours_s)))  # same tokens: time ratio
    return 0


def _report(name: str, step_seconds: list[float], tokens: int) -> None:
    """Seconds per step and tokens/s: medians over the runs."""
    rates = [tokens / s for s in step_seconds]
    print(
        f"{name:17s} : {statistics.median(step_seconds):7.2f} s/step = {statistics.median(rates):8.1f} tokens/s "
        f"(tokens/s {runs_note(rates)})"
    )


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m loongsage.bench train", description=__doc__.split("\n")[0])
    parser.add_argument("--backend", default="fsdp", choices=sorted(TRAIN_BACKENDS), help="trainer.backend of ours")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--response-len", type=int, default=64)
    parser.add_argument("--micro-batch-size", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3, help="timed steps in each run of each side")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch default)")
    parser.add_argument("--seed", type=int, default=0)
    add_repeats_argument(parser, default=5)
    return parser.parse_args(argv)


def _samples(args: argparse.Namespace) -> list[Sample]:
    """Random tokens; response lengths vary from half to full so padding is realistic."""
    rng = random.Random(args.seed)
    samples = []
    for _ in range(args.samples):
        response = [rng.randrange(1000, 20000) for _ in range(rng.randint(args.response_len // 2, args.response_len))]
        samples.append(
            Sample(
                prompt_ids=[rng.randrange(1000, 20000) for _ in range(args.prompt_len)],
                response_ids=response,
                response_logprobs=[-5.0] * len(response),
                advantage=rng.gauss(0.0, 1.0),
            )
        )
    return samples


def _trainer(model_path, args: argparse.Namespace):
    settings = TrainerConfig(
        backend=args.backend, micro_batch_size=args.micro_batch_size, lr=LR, num_threads=torch.get_num_threads()
    )
    worker = TRAIN_BACKENDS.get(args.backend)(str(model_path), settings, AlgorithmConfig(), seed=args.seed, rank=0)
    worker.setup(*worker.rendezvous_address())
    return worker


class _PlainLoop:
    def __init__(self, model_path, samples: list[Sample], micro_batch_size: int):
        self.model = load_causal_lm(model_path).train()
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=LR)
        self.micros = [pack_samples(chunk) for chunk in split_micro_batches(samples, micro_batch_size)]
        self.total_tokens = sum(float(micro.loss_mask.sum()) for micro in self.micros)

    def step(self) -> None:
        for micro in self.micros:
            out = self.model(input_ids=micro.input_ids, attention_mask=micro.attention_mask, labels=_labels(micro))
            (out.loss * (float(micro.loss_mask.sum()) / self.total_tokens)).backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


def _labels(micro: PackedBatch) -> torch.Tensor:
    """HF shifts labels itself: label t is the target of position t - 1, -100 = ignored."""
    labels = torch.full_like(micro.input_ids, -100)
    trained = micro.loss_mask.bool()
    labels[:, micro.first_column + 1 :][trained] = micro.targets[trained]
    return labels


def _timed(fn, steps: int) -> float:
    """Seconds per step over `steps` calls of `fn`."""
    start = time.perf_counter()
    for _ in range(steps):
        fn()
    return (time.perf_counter() - start) / steps
