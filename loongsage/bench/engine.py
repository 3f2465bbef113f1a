"""Embedded engine vs `transformers.generate` throughput on the same prompts and sampling settings.

    python -m loongsage.bench engine [--model smollm2-135m] [--prompts 32] [--max-new-tokens 128]

Like SGLang's and vLLM's throughput benchmarks, every prompt asks for a fixed number of output
tokens and end-of-sequence is ignored, so both sides produce exactly the same number of tokens
whatever they sample (with natural stops, two samplers' random lengths made the ratio swing by
+-25% from run to run). The lengths are long-tailed, as RL responses are: drawn per prompt from a
seeded log-normal and clipped to [8, max_new_tokens]. Both sides sample at temperature 1.0 /
top-p 1.0 / no top-k. The engine is driven over HTTP with all prompts in flight at once, as the
rollout workers do, each request with its own length; `generate` takes one length per call, so
it runs the batch to the longest and only each row's requested tokens count.
"""
from __future__ import annotations

import argparse
import copy
import asyncio
import math
import random
import time

import torch
from transformers import AutoModelForCausalLM

from loongsage.inference.client import EngineClient
from loongsage.inference.embedded.engine import Engine
from loongsage.inference.embedded.server import EmbeddedServer
from loongsage.models import load_tokenizer, resolve_model_path

QUESTIONS = [
    "What is 17 times 23?", "Name three primary colors.", "Write a haiku about autumn.",
    "Explain what a prime number is.", "What is the capital of France?", "Give me a synonym for happy.",
    "How many legs does a spider have?", "Summarize the plot of Cinderella in two sentences.",
    "What is the boiling point of water in Celsius?", "Translate 'good morning' into Spanish.",
    "List four planets of the solar system.", "Why is the sky blue?", "What is 144 divided by 12?",
    "Write a short greeting for a birthday card.", "What does a thermometer measure?",
    "Name a mammal that can fly.", "What is the square root of 81?", "Describe a cat in one sentence.",
    "What is photosynthesis?", "Who wrote Romeo and Juliet?", "Give an example of a verb.",
    "How many days are in a leap year?", "What is the largest ocean on Earth?",
    "Suggest a name for a pet goldfish.", "What is 5 factorial?", "Tell me a fun fact about octopuses.",
    "What language is spoken in Brazil?", "Convert 3 kilometers to meters.", "What is an adjective?",
    "Name two instruments in an orchestra.", "What causes rain?", "Write one sentence about the moon.",
]


def main(argv: list[str]) -> int:
    args = _parse(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    model_path = resolve_model_path(args.model)
    tokenizer = load_tokenizer(model_path)
    prompts = [_chat_prompt(tokenizer, QUESTIONS[i % len(QUESTIONS)]) for i in range(args.prompts)]
    lengths = output_lengths(len(prompts), args.max_new_tokens, args.seed)
    print(f"model={args.model} prompts={len(prompts)} output tokens={sum(lengths)} "
          f"(per prompt {min(lengths)}-{max(lengths)}, median {sorted(lengths)[len(lengths) // 2]}) "
          f"threads={torch.get_num_threads()}")

    engine_tokens, engine_s = _run_engine(model_path, prompts, lengths, args)
    hf_tokens, hf_s = _run_hf(model_path, tokenizer, prompts, lengths, args)

    engine_tps, hf_tps = engine_tokens / engine_s, hf_tokens / hf_s
    print(f"embedded engine : {engine_tokens:6d} tokens in {engine_s:7.2f} s = {engine_tps:8.1f} tokens/s")
    print(f"transformers    : {hf_tokens:6d} tokens in {hf_s:7.2f} s = {hf_tps:8.1f} tokens/s")
    print(f"ratio (engine / transformers): {engine_tps / hf_tps:.2f}x")
    return 0


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m loongsage.bench engine", description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch default)")
    parser.add_argument("--seed", type=int, default=0)
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


def _run_engine(model_path, prompts: list[list[int]], lengths: list[int], args) -> tuple[int, float]:
    cfg = {"max_running": len(prompts), "max_context": 2048, "seed": args.seed,
           "num_threads": args.threads or None}
    server = EmbeddedServer(Engine(model_path, cfg))
    client = EngineClient(server.start())
    params = {"temperature": 1.0, "top_p": 1.0, "ignore_eos": True}

    async def run_all(batch: list[list[int]], batch_lengths: list[int]):
        return await asyncio.gather(*(
            client.agenerate(input_ids=p, sampling_params={**params, "max_new_tokens": n})
            for p, n in zip(batch, batch_lengths)))

    try:
        asyncio.run(run_all(prompts[:2], [4, 4]))  # warm-up
        client.flush_cache()
        start = time.perf_counter()
        outputs = asyncio.run(run_all(prompts, lengths))
        elapsed = time.perf_counter() - start
    finally:
        client.close()
        server.stop()
    return sum(len(o["output_ids"]) for o in outputs), elapsed


def _run_hf(model_path, tokenizer, prompts: list[list[int]], lengths: list[int], args) -> tuple[int, float]:
    model = AutoModelForCausalLM.from_pretrained(str(model_path), dtype=torch.float32).eval()
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    width = max(len(p) for p in prompts)
    input_ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in prompts])
    attention_mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    torch.manual_seed(args.seed)
    with torch.inference_mode():
        model.generate(input_ids=input_ids[:2], attention_mask=attention_mask[:2],
                       generation_config=_sampling_config(model, pad_id, 4))
        start = time.perf_counter()
        out = model.generate(input_ids=input_ids, attention_mask=attention_mask,
                             generation_config=_sampling_config(model, pad_id, max(lengths)))
        elapsed = time.perf_counter() - start
    generated = out.shape[1] - width
    return sum(min(n, generated) for n in lengths), elapsed


def _sampling_config(model, pad_id: int, max_new_tokens: int):
    config = copy.deepcopy(model.generation_config)
    config.update(do_sample=True, temperature=1.0, top_p=1.0, top_k=0, pad_token_id=pad_id,
                  max_new_tokens=max_new_tokens, eos_token_id=None)  # ignore EOS, as the engine requests do
    return config
