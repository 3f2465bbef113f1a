"""N engines behind one router vs one engine, and the prefix cache with trajectory affinity vs
without.

    python -m loongsage.bench agentflow --engines 2 [--model tiny] [--conversations 8] [--turns 8]
                                        [--max-tokens 64] [--think-ms 40] [--repeats 3]

Each engine is an embedded engine in its own process with one torch thread (as a Ray actor or
an SGLang server would run), all behind one AgentFlow router on a thread of this process. The
workload is agents' shape: all conversations at once, each turn sent after the previous one's
answer, each turn's messages the previous ones plus the reply and a new user message, every
turn a fixed number of tokens (EOS ignored, seeded per turn) so every pass does the same work.
Between turns each agent "runs a tool" for a random 0 to `--think-ms` ms (the same draws in
every pass): without it the conversations move in lockstep and arrive in the same order every
turn, and least-loaded choice alone would send each to the same engine every time by accident.

Throughput: episodes (whole conversations) per second through a router over the N engines vs
a router over the first engine alone, in interleaved pairs (`--repeats`), every engine's prompt
cache flushed before each pass. Each engine has one torch thread either way, so the comparison
is N engines' worth of compute against one's, where there are cores for them: on a machine
with fewer cores than engines plus the router and the clients (the 2-core development machine)
the engines compete with each other and with the router for the cores, and the ratio says
little about N engines on N GPUs. Whatever it is, the ratio printed is the one measured (on the
2-core machine: 1.17x and 1.23x for 2 engines in two runs, tiny model, default sizes).

Prefix cache: sum of the `cached_tokens` the engines report (through the router's usage) over
the sum of prompt tokens, on the N engines with affinity (each trajectory stays on its engine,
the router's EnginePool keyed by trajectory id: over the throughput passes) and without (the
same pool with every key None, least outstanding requests only: one more pass, cache flushed).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import time
from dataclasses import dataclass

import httpx

from loongsage.agentflow.router import Router, RouterConfig
from loongsage.agentflow.router.server import RouterServer
from loongsage.bench.engine_process import opening_message, start_engine_process
from loongsage.bench.repeat import add_repeats_argument, interleaved, pair_ratios, ratio_line, runs_note
from loongsage.inference.client import EngineClient
from loongsage.inference.engine_pool import EnginePool
from loongsage.models import load_tokenizer, resolve_model_path


class NoAffinityPool(EnginePool):
    """Least outstanding requests for every call: the baseline affinity is measured against."""

    async def call(self, key, request):
        return await super().call(None, request)


@dataclass
class Pass:
    seconds: float
    episodes: int
    prompt_tokens: int
    cached_tokens: int

    @property
    def episodes_per_s(self) -> float:
        return self.episodes / self.seconds

    @property
    def hit_rate(self) -> float:
        return self.cached_tokens / self.prompt_tokens


def main(argv: list[str]) -> int:
    args = _parse(argv)
    model_path = resolve_model_path(args.model)
    engine_cfg = {"max_running": args.conversations, "max_context": 2048, "num_threads": 1}
    processes, urls = [], []
    for _ in range(args.engines):
        process, url = start_engine_process(model_path, engine_cfg)
        processes.append(process)
        urls.append(url)
    tokenizer = load_tokenizer(model_path)
    one = _router(model_path, urls[:1], tokenizer)
    many = _router(model_path, urls, tokenizer)
    unkeyed = _router(model_path, urls, tokenizer, affinity=False)
    engines = [EngineClient(url) for url in urls]
    cores = len(os.sched_getaffinity(0))
    print(
        f"model={args.model} engines={args.engines} (one torch thread each, own process) "
        f"conversations={args.conversations} turns={args.turns} max_tokens={args.max_tokens} "
        f"think_ms={args.think_ms:g} repeats={args.repeats} cores={cores}"
    )
    try:
        workload = Workload(args, engines)
        workload.run(one, "warmup-1")
        workload.run(many, "warmup-n")
        singles, multis = interleaved(
            lambda i: workload.run(one, f"one-{i}"), lambda i: workload.run(many, f"many-{i}"), args.repeats
        )
        without = workload.run(unkeyed, "unkeyed")
    finally:
        for client in engines:
            client.close()
        for server in (one, many, unkeyed):
            server.stop()
        for process in processes:
            process.terminate()
            process.join()
    _report("1 engine", singles)
    _report(f"{args.engines} engines", multis)
    ratios = pair_ratios([p.episodes_per_s for p in multis], [p.episodes_per_s for p in singles])
    print(ratio_line(f"{args.engines} engines / 1 engine, episodes/s", ratios))
    if cores < args.engines + 2:
        print(
            f"note: {cores} cores for {args.engines} engines, the router and the clients: the engines compete "
            "with each other and the router for cores, so this is not what they would give on devices of their own; "
            "it is what this machine measured"
        )
    with_affinity = sum(p.cached_tokens for p in multis) / sum(p.prompt_tokens for p in multis)
    print(
        f"prefix cache hit rate on {args.engines} engines (cached / prompt tokens, as the engines report them): "
        f"with trajectory affinity {100 * with_affinity:.1f}% ({len(multis)} passes), "
        f"least-loaded only {100 * without.hit_rate:.1f}% (1 pass, {without.episodes_per_s:.2f} episodes/s)"
    )
    return 0


def _router(model_path, urls: list[str], tokenizer, affinity: bool = True) -> RouterServer:
    router = Router(
        RouterConfig(model=str(model_path), engine_urls=tuple(urls), served_model_names=("bench",)), tokenizer=tokenizer
    )
    if not affinity:
        router.engines = NoAffinityPool(router.engines.roster, router.cfg.request_timeout_s)
    server = RouterServer(router)
    server.start()
    return server


def _report(name: str, passes: list[Pass]) -> None:
    rates = [p.episodes_per_s for p in passes]
    print(f"{name:10s}: {statistics.median(rates):6.2f} episodes/s ({runs_note(rates, digits=2)})")


class Workload:
    def __init__(self, args: argparse.Namespace, engines: list[EngineClient]):
        self.args, self.engines = args, engines

    def run(self, server: RouterServer, tag: str) -> Pass:
        """One pass: every conversation through `server`, from flushed prompt caches."""
        for engine in self.engines:
            engine.flush_cache()
        started = time.perf_counter()
        usages = asyncio.run(self._conversations(server, tag))
        seconds = time.perf_counter() - started
        for conversation in range(self.args.conversations):
            server.router.store.pop(f"{tag}-{conversation}")
        return Pass(
            seconds=seconds,
            episodes=self.args.conversations,
            prompt_tokens=sum(u["prompt_tokens"] for u in usages),
            cached_tokens=sum(u["prompt_tokens_details"]["cached_tokens"] for u in usages),
        )

    async def _conversations(self, server: RouterServer, tag: str) -> list[dict]:
        headers = {"Authorization": f"Bearer {server.router.api_key}"}
        async with httpx.AsyncClient(headers=headers, limits=httpx.Limits(max_connections=None), timeout=600) as client:
            chats = [self._chat(client, server, tag, c) for c in range(self.args.conversations)]
            return [usage for usages in await asyncio.gather(*chats) for usage in usages]

    async def _chat(self, client: httpx.AsyncClient, server: RouterServer, tag: str, conversation: int) -> list[dict]:
        url = f"{server.url_for(f'{tag}-{conversation}')}/chat/completions"
        messages = [{"role": "user", "content": opening_message(conversation)}]
        usages = []
        think = random.Random(conversation)  # the same tool times in every pass
        for turn in range(self.args.turns):
            body = {
                "model": "bench",
                "messages": messages,
                "max_tokens": self.args.max_tokens,
                "temperature": 1.0,
                "ignore_eos": True,
                "seed": 1000 * conversation + turn,
            }
            response = await client.post(url, json=body)
            response.raise_for_status()
            answer = response.json()
            usages.append(answer["usage"])
            messages += [answer["choices"][0]["message"], {"role": "user", "content": f"And then? ({turn})"}]
            await asyncio.sleep(think.uniform(0, self.args.think_ms / 1000))
        return usages


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m loongsage.bench agentflow --engines N", description=__doc__.split("\n")[0])
    parser.add_argument("--engines", type=int, required=True, help="engines behind the router, compared with 1 (at least 2)")
    parser.add_argument("--model", default="tiny")
    parser.add_argument(
        "--conversations",
        type=int,
        default=8,
        help="at once (default 8: one engine's prompt cache keeps 16 prompts, two turns of 8 conversations)",
    )
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--think-ms", type=float, default=40.0, help="an agent's tool time between turns, at most")
    add_repeats_argument(parser, default=3)
    args = parser.parse_args(argv)
    if args.engines < 2:
        parser.error(f"--engines {args.engines}: compares N engines with 1, so N must be at least 2")
    return args
