"""Router overhead per turn: multi-turn chats through the AgentFlow router vs the same token ids
sent straight to the engine's `/generate`.

    python -m loongsage.bench agentflow [--model tiny] [--conversations 32] [--turns 3] [--max-tokens 64]
                                        [--repeats 3] [--api chat|responses]

With `--api responses` the same conversations go through the router's Responses API (each turn
one user message and `previous_response_id`, as SDKs continue a conversation) against its chat
completions path: the two sample the same ids turn for turn (checked), so the ratio is the cost
of the API alone. With `--engines N` it measures something else: N engines behind the router vs
one, and the prefix cache with trajectory affinity vs without (agentflow_engines.py).

The engine runs in its own process (as a Ray actor or an SGLang server would), the router on a
thread of this one. All conversations run at once, each turn after the previous one, as agents do. Every turn asks
for a fixed number of tokens with EOS ignored and a per-turn sampling seed, so both paths do
exactly the same work: the direct path replays, turn by turn, the prompt ids the router built,
and its outputs are checked to be the router's. Both sides post JSON with httpx (the router's
side as an OpenAI chat completion, the engine's as `/generate`), the engine's prompt cache is
flushed before every pass, and passes alternate (direct, router, direct, router, ...;
`--repeats` pairs, `--rounds` is its older name) after one warm-up pass each way: through the
router, whose ids the direct passes replay, and then direct, so that neither side's first timed
pass is the first of its kind in this process. Per side, a pass's figure is its mean latency per
turn; printed are the medians over the passes and the median and range of the pairs' ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import httpx

from loongsage.agentflow.router import Router, RouterConfig
from loongsage.agentflow.router.server import RouterServer
from loongsage.bench import agentflow_engines
from loongsage.bench.engine_process import opening_message, start_engine_process
from loongsage.bench.repeat import add_repeats_argument, interleaved, pair_ratios, ratio_line, runs_note
from loongsage.inference.client import EngineClient
from loongsage.models import load_tokenizer, resolve_model_path


def main(argv: list[str]) -> int:
    if any(arg == "--engines" or arg.startswith("--engines=") for arg in argv):
        return agentflow_engines.main(argv)
    args = _parse(argv)
    model_path = resolve_model_path(args.model)
    engine_cfg = {"max_running": args.conversations, "max_context": 2048, "num_threads": args.threads or None}
    engine, engine_url = start_engine_process(model_path, engine_cfg)
    router = Router(
        RouterConfig(model=str(model_path), engine_urls=(engine_url,), served_model_names=("bench",)),
        tokenizer=load_tokenizer(model_path),
    )
    server = RouterServer(router)
    server.start()
    engine_client = EngineClient(engine_url)
    print(
        f"model={args.model} conversations={args.conversations} turns={args.turns} "
        f"max_tokens={args.max_tokens} engine threads={args.threads or 'default'} repeats={args.repeats}"
    )
    try:
        bench = Bench(args, server, engine_client)
        if args.api == "responses":
            return _responses_against_chat(bench, args.repeats)
        asyncio.run(bench.through_router("warmup"))
        turns = bench.recorded_turns("warmup")
        asyncio.run(bench.direct(turns))  # warm-up of the direct path

        def through_router(index: int) -> tuple[list[float], list[float]]:
            tag = f"r{index}"
            seconds = asyncio.run(bench.through_router(tag))
            bench.check_same_outputs(turns, tag)
            return seconds, bench.engine_seconds(tag)

        direct_runs, router_runs = interleaved(lambda _: asyncio.run(bench.direct(turns)), through_router, args.repeats)
    finally:
        engine_client.close()
        server.stop()
        engine.terminate()
        engine.join()
    router_s, inside_s = [r for r, _ in router_runs], [e for _, e in router_runs]
    _report("engine /generate", direct_runs)
    _report("through router", router_s)
    _report("  of which engine", inside_s)
    added = [statistics.mean(r - e for r, e in zip(*run)) for run in router_runs]
    share = [a / statistics.mean(e) for a, (_, e) in zip(added, router_runs)]
    print(
        f"router's own time per turn: {statistics.median(added) * 1e3:.1f} ms "
        f"({100 * statistics.median(share):.1f}% of the engine time of the same turns; "
        f"ms {runs_note([a * 1e3 for a in added])})"
    )
    ratios = pair_ratios([statistics.mean(r) for r in router_s], [statistics.mean(d) for d in direct_runs])
    print(
        f"{ratio_line('router / engine latency per turn', ratios, digits=3)}  "
        f"(added latency {100 * (statistics.median(ratios) - 1):+.1f}%)"
    )
    return 0


def _responses_against_chat(bench: Bench, repeats: int) -> int:
    asyncio.run(bench.through_router("warmup"))
    turns = bench.recorded_turns("warmup")
    asyncio.run(bench.through_router("warmup-responses", api="responses"))

    def one_pass(api: str):
        def run(index: int) -> list[float]:
            tag = f"{api}{index}"
            seconds = asyncio.run(bench.through_router(tag, api=api))
            bench.check_same_outputs(turns, tag)
            return seconds

        return run

    chat_runs, responses_runs = interleaved(one_pass("chat"), one_pass("responses"), repeats)
    _report("chat completions", chat_runs)
    _report("responses", responses_runs)
    ratios = pair_ratios([statistics.mean(r) for r in responses_runs], [statistics.mean(c) for c in chat_runs])
    print(f"{ratio_line('responses / chat completions latency per turn', ratios, digits=3)}")
    return 0


def _report(name: str, passes: list[list[float]]) -> None:
    """Per pass the mean latency of its turns; printed: the median pass, each pass, and the median turn."""
    means = [statistics.mean(seconds) * 1e3 for seconds in passes]
    every_turn = [s for seconds in passes for s in seconds]
    print(
        f"{name:18s}: {statistics.median(means):8.1f} ms per turn (pass means, {runs_note(means)}; "
        f"median turn {statistics.median(every_turn) * 1e3:.1f}, {len(passes[0])} turns a pass)"
    )


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m loongsage.bench agentflow", description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--conversations", type=int, default=32)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="the engine's torch threads (default 1: on a small machine the router and the "
        "agents need a core too; 0 = torch default)",
    )
    parser.add_argument(
        "--api",
        choices=("chat", "responses"),
        default="chat",
        help="chat: the router's chat completions against the engine's /generate; responses: the "
        "Responses API against chat completions",
    )
    add_repeats_argument(parser, "--rounds")
    return parser.parse_args(argv)


class Bench:
    def __init__(self, args: argparse.Namespace, server: RouterServer, engine: EngineClient):
        self.args, self.server, self.engine = args, server, engine
        self.router = server.router

    def _seed(self, conversation: int, turn: int) -> int:
        return 1000 * conversation + turn

    async def through_router(self, tag: str, api: str = "chat") -> list[float]:
        self.engine.flush_cache()
        headers = {"Authorization": f"Bearer {self.router.api_key}"}
        limits = httpx.Limits(max_connections=None)
        conversation = self._chat if api == "chat" else self._responses
        async with httpx.AsyncClient(headers=headers, limits=limits, timeout=600) as client:
            per_conversation = await asyncio.gather(*(conversation(client, tag, c) for c in range(self.args.conversations)))
        return [s for seconds in per_conversation for s in seconds]

    def _follow_up(self, turn: int) -> str:
        return f"And then? ({turn})"

    async def _chat(self, client: httpx.AsyncClient, tag: str, conversation: int) -> list[float]:
        url = f"{self.server.url_for(f'{tag}-{conversation}')}/chat/completions"
        messages = [{"role": "user", "content": opening_message(conversation)}]
        seconds = []
        for turn in range(self.args.turns):
            body = {
                "model": "bench",
                "messages": messages,
                "max_tokens": self.args.max_tokens,
                "temperature": 1.0,
                "ignore_eos": True,
                "seed": self._seed(conversation, turn),
            }
            start = time.perf_counter()
            response = await client.post(url, json=body)
            seconds.append(time.perf_counter() - start)
            response.raise_for_status()
            messages += [response.json()["choices"][0]["message"], {"role": "user", "content": self._follow_up(turn)}]
        return seconds

    async def _responses(self, client: httpx.AsyncClient, tag: str, conversation: int) -> list[float]:
        url = f"{self.server.url_for(f'{tag}-{conversation}')}/responses"
        text, previous, seconds = opening_message(conversation), None, []
        for turn in range(self.args.turns):
            body = {
                "model": "bench",
                "input": [{"role": "user", "content": text}],
                "previous_response_id": previous,
                "max_output_tokens": self.args.max_tokens,
                "temperature": 1.0,
                "ignore_eos": True,
                "seed": self._seed(conversation, turn),
            }
            start = time.perf_counter()
            response = await client.post(url, json=body)
            seconds.append(time.perf_counter() - start)
            response.raise_for_status()
            text, previous = self._follow_up(turn), response.json()["id"]
        return seconds

    def recorded_turns(self, tag: str) -> list[list[tuple[list[int], list[int]]]]:
        """Per conversation, the (prompt ids, output ids) of each turn as the router recorded them."""
        conversations = []
        for conversation in range(self.args.conversations):
            (branch,) = self.router.store.get(f"{tag}-{conversation}").branches
            conversations.append([(t.prompt_ids, t.output_ids) for t in branch.turns])
        return conversations

    def engine_seconds(self, tag: str) -> list[float]:
        """Per turn, in the order `through_router` returns its latencies: the router's wait on the engine."""
        return [
            t.engine_seconds
            for c in range(self.args.conversations)
            for t in self.router.store.get(f"{tag}-{c}").branches[0].turns
        ]

    async def direct(self, turns: list[list[tuple[list[int], list[int]]]]) -> list[float]:
        self.engine.flush_cache()
        per_conversation = await asyncio.gather(*(self._replay(c, chat) for c, chat in enumerate(turns)))
        return [s for seconds in per_conversation for s in seconds]

    async def _replay(self, conversation: int, chat: list[tuple[list[int], list[int]]]) -> list[float]:
        seconds = []
        for turn, (prompt_ids, output_ids) in enumerate(chat):
            params = {
                "temperature": 1.0,
                "max_new_tokens": self.args.max_tokens,
                "ignore_eos": True,
                "sampling_seed": self._seed(conversation, turn),
            }
            start = time.perf_counter()
            out = await self.engine.agenerate(input_ids=prompt_ids, sampling_params=params, return_logprob=True)
            seconds.append(time.perf_counter() - start)
            if out["output_ids"] != output_ids:
                raise RuntimeError(
                    f"conversation {conversation} turn {turn}: the engine sampled other ids directly "
                    "than through the router; the comparison would not be like for like"
                )
        return seconds

    def check_same_outputs(self, turns, tag: str) -> None:
        if self.recorded_turns(tag) != turns:
            raise RuntimeError(f"pass {tag} through the router sampled other ids than the warm-up pass")
