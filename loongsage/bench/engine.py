"""Embedded engine vs `transformers.generate` throughput on the same prompts and sampling settings.

    python -m loongsage.bench engine [--model smollm2-135m] [--prompts 32] [--max-new-tokens 128] [--repeats 5]

Like SGLang's and vLLM's throughput benchmarks, every prompt asks for a fixed number of output
tokens and end-of-sequence is ignored, so both sides produce exactly the same number of tokens
whatever they sample (with natural stops, two samplers' random lengths made the ratio swing by
+-25% from run to run). The lengths are long-tailed, as RL responses are: drawn per prompt from a
seeded log-normal and clipped to [8, max_new_tokens]. Both sides sample at temperature 1.0 /
top-p 1.0 / no top-k. The engine is driven over HTTP with all prompts in flight at once, as the
rollout workers do, each request with its own length; `generate` takes one length per call, so
it runs the batch to the longest and only each row's requested tokens count.

Both sides are loaded once and each runs one full pass untimed (a side's first full-size batch
pays its first-touch allocations, which the two sides pay differently), then they are timed in
turns (transformers, engine, transformers, ...; `--repeats`). Each keeps its model between
passes, as a served engine or a user's script would. The engine's prompt cache is flushed
before each of its passes, so no pass reuses the last one's prefixes. On a quiet 2-core
machine one side's tokens/s moved by up to 24% from one pass to the next and the pairs'
ratios ranged 1.51x-1.98x, hence 5 pairs by default.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import dataclasses
import math
import random
import statistics
import time

import torch
from transformers import AutoModelForCausalLM

from loongsage.bench.repeat import add_repeats_argument, interleaved, pair_ratios, ratio_line, runs_note
from loongsage.bench.roofline import GemmBound, decode_steps_by_rows, distinct_prompt_tokens
from loongsage.inference.client import EngineClient
from loongsage.inference.embedded.engine import Engine
from loongsage.inference.embedded.llama import ModelConfig
from loongsage.inference.embedded.scheduler import cache_slots
from loongsage.inference.embedded.server import EmbeddedServer
from loongsage.models import load_tokenizer, resolve_model_path

QUESTIONS = [
    "What is 17 times 23?",
    "Name three primary colors.",
    "Write a haiku about autumn.",
    "Explain what a prime number is.",
    "What is the capital of France?",
    "Give me a synonym for happy.",
    "How many legs does a spider have?",
    "Summarize the plot of Cinderella in two sentences.",
    "What is the boiling point of water in Celsius?",
    "Translate 'good morning' into Spanish.",
    "List four planets of the solar system.",
    "Why is the sky blue?",
    "What is 144 divided by 12?",
    "Write a short greeting for a birthday card.",
    "What does a thermometer measure?",
    "Name a mammal that can fly.",
    "What is the square root of 81?",
    "Describe a cat in one sentence.",
    "What is photosynthesis?",
    "Who wrote Romeo and Juliet?",
    "Give an example of a verb.",
    "How many days are in a leap year?",
    "What is the largest ocean on Earth?",
    "Suggest a name for a pet goldfish.",
    "What is 5 factorial?",
    "Tell me a fun fact about octopuses.",
    "What language is spoken in Brazil?",
    "Convert 3 kilometers to meters.",
    "What is an adjective?",
    "Name two instruments in an orchestra.",
    "What causes rain?",
    "Write one sentence about the moon.",
]


def main(argv: list[str]) -> int:
    args = _parse(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    model_path = resolve_model_path(args.model)
    tokenizer = load_tokenizer(model_path)
    prompts = [_chat_prompt(tokenizer, QUESTIONS[i % len(QUESTIONS)]) for i in range(args.prompts)]
    lengths = output_lengths(len(prompts), args.max_new_tokens, args.seed)
    print(
        f"model={args.model} prompts={len(prompts)} output tokens={sum(lengths)} "
        f"(per prompt {min(lengths)}-{max(lengths)}, median {sorted(lengths)[len(lengths) // 2]}) "
        f"threads={torch.get_num_threads()} repeats={args.repeats}"
    )

    engine = _EngineSide(model_path, prompts, lengths, args)
    try:
        hf = _HFSide(model_path, tokenizer, prompts, lengths, args)
        # Warm-up, untimed: each side's first full-size pass.
        hf.run()
        engine.run()
        hf_runs, engine_runs = interleaved(lambda _: hf.run(), lambda _: engine.run(), args.repeats)
    finally:
        engine.close()

    _report("embedded engine", [(t, s) for t, s, _ in engine_runs])
    _report("transformers", hf_runs)
    ratios = pair_ratios([t / s for t, s, _ in engine_runs], [t / s for t, s in hf_runs])
    print(ratio_line("engine / transformers tokens/s", ratios))
    model_cfg = ModelConfig.from_dir(model_path)
    if model_cfg.moe is None:
        _report_bound(GemmBound(model_cfg), prompts, lengths, engine_runs)
    else:  # which experts a token meets is the router's choice: no fixed matmul shapes to time
        print(f"bound: not measured for {model_cfg.architecture}, a mixture of experts (bench/roofline.py times dense models)")
    return 0


def _report_bound(bound: GemmBound, prompts: list[list[int]], lengths: list[int], engine_runs) -> None:
    """The engine's seconds in each phase (medians over its passes) against the bound's."""
    prefill = bound.prefill(distinct_prompt_tokens(prompts))
    decode = bound.decode(decode_steps_by_rows(lengths), list(range(1, cache_slots(len(prompts)) + 1)))
    in_prefill = statistics.median(phases["prefill_s"] for _, _, phases in engine_runs)
    in_decode = statistics.median(phases["decode_s"] for _, _, phases in engine_runs)
    wall = statistics.median(s for _, s, _ in engine_runs)
    tokens = engine_runs[0][0]
    print("bound: the model's weight matmuls alone, timed on this machine at this workload's shapes (bench/roofline.py)")
    print(
        f"  prefill: {prefill.rows} prompt tokens (of {sum(len(p) for p in prompts)}, their common prefix once), "
        f"bound {prefill.seconds:.2f} s ({prefill.gflops:.0f} GFLOP/s); "
        f"engine {in_prefill:.2f} s admitting them = {prefill.seconds / in_prefill:.0%} of the bound"
    )
    print(
        f"  decode:  {decode.rows} tokens in {max(lengths) - 1} steps of 1-{len(prompts)} rows, bound {decode.seconds:.2f} s "
        f"({decode.gflops:.0f} GFLOP/s); engine {in_decode:.2f} s in decode steps = {decode.seconds / in_decode:.0%} of the bound"
    )
    both = prefill.seconds + decode.seconds
    print(
        f"  all:     bound {tokens / both:.1f} tokens/s; engine {tokens / wall:.1f} tokens/s = {both / wall:.0%} of it "
        f"(its wall time includes HTTP and the scheduler's waits)"
    )


def _report(name: str, runs: list[tuple[int, float]]) -> None:
    """Tokens are the same every pass (fixed lengths); seconds and tokens/s are medians over the passes."""
    rates = [t / s for t, s in runs]
    print(
        f"{name:16s}: {runs[0][0]:6d} tokens in {statistics.median(s for _, s in runs):7.2f} s = "
        f"{statistics.median(rates):8.1f} tokens/s (tokens/s {runs_note(rates)})"
    )


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m loongsage.bench engine", description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch default)")
    parser.add_argument("--seed", type=int, default=0)
    add_repeats_argument(parser, default=5)
    return parser.parse_args(argv)


def _chat_prompt(tokenizer, question: str) -> list[int]:
    messages = [{"role": "user", "content": question}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return tokenizer.encode(text, add_special_tokens=False)


def output_lengths(count: int, max_new_tokens: int, seed: int) -> list[int]:
    """Long-tailed per-prompt output lengths: median a third of the cap, a few at the cap."""
    rng = random.Random(seed)
    median = math.log(max(8, max_new_tokens // 3))
    return [min(max_new_tokens, max(8, round(rng.lognormvariate(median, 0.6)))) for _ in range(count)]


class _EngineSide:
    """The engine behind its HTTP server, all prompts in flight at once, as the rollout workers drive it."""

    def __init__(self, model_path, prompts: list[list[int]], lengths: list[int], args):
        self.prompts, self.lengths = prompts, lengths
        cfg = {"max_running": len(prompts), "max_context": 2048, "seed": args.seed, "num_threads": args.threads or None}
        self.engine = Engine(model_path, cfg)
        self.server = EmbeddedServer(self.engine)
        self.client = EngineClient(self.server.start())
        self.params = {"temperature": 1.0, "top_p": 1.0, "ignore_eos": True}

    def run(self) -> tuple[int, float, dict[str, float]]:
        """(tokens, seconds, the scheduler's seconds in prefill_s and decode_s during the pass)."""
        self.client.flush_cache()
        before = dataclasses.replace(self.engine.scheduler.stats)
        start = time.perf_counter()
        outputs = asyncio.run(self._all(self.prompts, self.lengths))
        elapsed = time.perf_counter() - start
        after = self.engine.scheduler.stats
        phases = {phase: getattr(after, phase) - getattr(before, phase) for phase in ("prefill_s", "decode_s")}
        return sum(len(o["output_ids"]) for o in outputs), elapsed, phases

    async def _all(self, batch: list[list[int]], batch_lengths: list[int]):
        return await asyncio.gather(
            *(
                self.client.agenerate(input_ids=p, sampling_params={**self.params, "max_new_tokens": n})
                for p, n in zip(batch, batch_lengths)
            )
        )

    def close(self) -> None:
        self.client.close()
        self.server.stop()


class _HFSide:
    """`generate` on the whole batch, left-padded, to the longest requested length."""

    def __init__(self, model_path, tokenizer, prompts: list[list[int]], lengths: list[int], args):
        self.model = AutoModelForCausalLM.from_pretrained(str(model_path), dtype=torch.float32).eval()
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self.width = max(len(p) for p in prompts)
        self.input_ids = torch.tensor([[self.pad_id] * (self.width - len(p)) + p for p in prompts])
        self.attention_mask = torch.tensor([[0] * (self.width - len(p)) + [1] * len(p) for p in prompts])
        self.lengths, self.seed = lengths, args.seed

    def run(self) -> tuple[int, float]:
        torch.manual_seed(self.seed)
        with torch.inference_mode():
            start = time.perf_counter()
            out = self.model.generate(
                input_ids=self.input_ids,
                attention_mask=self.attention_mask,
                generation_config=_sampling_config(self.model, self.pad_id, max(self.lengths)),
            )
            elapsed = time.perf_counter() - start
        generated = out.shape[1] - self.width
        return sum(min(n, generated) for n in self.lengths), elapsed


def _sampling_config(model, pad_id: int, max_new_tokens: int):
    config = copy.deepcopy(model.generation_config)
    config.update(
        do_sample=True, temperature=1.0, top_p=1.0, top_k=0, pad_token_id=pad_id, max_new_tokens=max_new_tokens, eos_token_id=None
    )  # ignore EOS, as the engine requests do
    return config
