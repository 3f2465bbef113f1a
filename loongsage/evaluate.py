"""Held-out reward of models on a recipe's data sources.

    python -m loongsage.evaluate <model> [<model> ...] recipe=<recipe> [overrides] [--items 100] [--samples 4]

Each model (a registry name or an HF directory, e.g. a run's checkpoints/step_000024/trainer) is
served by the embedded engine in this process and answers `--items` items of every data source
of the composed config (each data.mix entry, or data.source) drawn from the source's eval split
(`split: eval`, which never shares an item with training), `--samples` times each, sampled as
the run samples (rollout.temperature, top_p, top_k; seeded, so a rerun gives the same answers)
with the source's system prompt and token limit. Each answer is scored by the source's reward:
the mean is what the run's rollout/reward_mean measures, on items it never trains on. (Greedy
answers would hide what RL changes most in a small model: how often a sample is right.) Prints one row per model
and source, and writes them as JSON with --json.

Only single-completion sources are evaluated (an agent source needs its sandboxes and tools: its
reward is the run's own rollout/reward_mean).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from hydra import compose, initialize_config_dir

from loongsage.config import Config, register, to_config

# launch.py's config_path: the recipes next to the package in a checkout (pip install -e).
RECIPES_DIR = Path(__file__).resolve().parent.parent / "recipes"


@dataclass(frozen=True)
class EvalSource:
    """One data source as evaluated: where its items come from and how they are asked and scored."""

    name: str
    source: str
    options: dict
    reward: str
    system_prompt: str | None
    max_new_tokens: int


def eval_sources(cfg: Config) -> list[EvalSource]:
    """The composed config's single-completion sources (data.mix entries with agent chat, or
    data.source of a run without an agent)."""
    if not cfg.data.mix:
        if cfg.agent.name not in ("", "chat"):
            return []
        return [
            EvalSource(
                "", cfg.data.source, dict(cfg.data.options), cfg.data.reward, cfg.data.system_prompt, cfg.rollout.max_new_tokens
            )
        ]
    sources = []
    for entry in cfg.data.mix:
        if (entry.agent or cfg.agent.name) != "chat":
            continue
        options = {**cfg.agent.options, **entry.agent_options}
        sources.append(
            EvalSource(
                entry.name,
                entry.source,
                dict(entry.options),
                entry.reward or cfg.data.reward,
                entry.system_prompt,
                int(options.get("max_tokens", cfg.rollout.max_new_tokens)),
            )
        )
    return sources


def evaluate(model: str, sources: list[EvalSource], items: int, samples: int, cfg: Config) -> dict[str, float]:
    """Mean reward of sampled answers per source."""
    from loongsage.agentflow.agents.base import AgentResult
    from loongsage.inference.client import EngineClient
    from loongsage.inference.embedded.engine import Engine
    from loongsage.inference.embedded.server import EmbeddedServer
    from loongsage.models import load_tokenizer, resolve_model_path
    from loongsage.tasks.registry import get_data_source, get_reward
    from loongsage.tasks.scoring import score_safely

    path = str(resolve_model_path(model))
    tokenizer = load_tokenizer(path)
    server = EmbeddedServer(Engine(path, {"max_running": 64, "max_context": cfg.rollout.max_context}))
    server.start()
    client = EngineClient(server.base_url, timeout=3600)
    try:
        rewards = {}
        for source in sources:
            try:
                data = get_data_source(source.source)(**{**source.options, "split": "eval"})
            except TypeError as exc:
                raise ValueError(
                    f"data source {source.source!r} ({source.name or 'data.source'}) has no eval split: {exc}"
                ) from None
            chosen = [data[i] for i in range(min(items, len(data))) for _ in range(samples)]
            prompts = [_prompt_ids(tokenizer, item, source.system_prompt) for item in chosen]
            r = cfg.rollout
            params = [
                {"max_new_tokens": source.max_new_tokens, "temperature": r.temperature, "top_p": r.top_p, "top_k": r.top_k,
                 "sampling_seed": index}
                for index in range(len(prompts))
            ]  # fmt: skip
            answers = client.generate(input_ids=prompts, sampling_params=params)
            reward = get_reward(source.reward)
            scores = [
                score_safely(reward, item, AgentResult(exit_status="submitted", answer=answer["text"]))[0]
                for item, answer in zip(chosen, answers)
            ]
            rewards[source.name] = statistics.fmean(scores)
        return rewards
    finally:
        server.stop()


def _prompt_ids(tokenizer, item: dict, system_prompt: str | None) -> list[int]:
    prompt = item["prompt"]
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
    if system_prompt is not None:
        messages = [{"role": "system", "content": system_prompt}, *messages]
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m loongsage.evaluate", description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", help="registry names or HF directories; then Hydra overrides (key=value)")
    parser.add_argument("--items", type=int, default=100, help="eval items per data source")
    parser.add_argument("--samples", type=int, default=4, help="sampled answers per item")
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_intermixed_args(argv)
    models = [m for m in args.models if "=" not in m]
    overrides = [m for m in args.models if "=" in m]
    register()
    with initialize_config_dir(config_dir=str(RECIPES_DIR), version_base=None):
        cfg = to_config(compose(config_name="config", overrides=overrides))
    sources = eval_sources(cfg)
    if not sources:
        raise SystemExit("error: the config has no single-completion data source to evaluate (agent sources are not)")
    results = {model: evaluate(model, sources, args.items, args.samples, cfg) for model in models}
    width = max(len(m) for m in models)
    print(f"{'model':<{width}}  " + "  ".join(f"{s.name or s.source:>12s}" for s in sources))
    for model, rewards in results.items():
        print(f"{model:<{width}}  " + "  ".join(f"{rewards[s.name]:>12.3f}" for s in sources))
    if args.json:
        with open(args.json, "w") as file:
            json.dump({"items": args.items, "samples": args.samples, "overrides": overrides, "rewards": results}, file, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
