"""Synchronous vs fully asynchronous training on the same agentic workload, on this machine.

    python -m loongsage.bench async [--model tiny] [--steps 8] [--prompts 4] [--group 4]
                                    [--max-staleness 2] [--window window_gated] [--turns 3] [--repeats 3]
    python -m loongsage.bench async --simulate [...]   # the GPU-cluster model, see async_simulation

Both runs go through `launch.py` with the same recipe, seed and data: multi-turn episodes whose
turns are a model call through the router and a command in the episode's own bubblewrap (or
local) sandbox taking a long-tailed time (see async_workload). Only `run.mode` differs. Time
is the training loop's after its first step (the sum of `timing/step_s` over steps 2..N), so
start-up is left out, and so is the first step, printed apart: it fills the pipeline (fully_async
starts every episode it may run at once, and its first step waits for the first groups among
all of them). That one-off fill took a third of an 8-step fully_async run's steps (10 s of
28 s) and a long run pays it once. The two modes run in turns (sync, fully_async, sync, ...;
`--repeats` pairs), each run a fresh `launch.py` process with its own Ray, so no run inherits
a warm model or engine from another (only the OS file cache carries over, and it serves
start-up, which is not timed). Printed per mode, as medians over its runs: first step, loop
time, trainer and rollout idle ratios, staleness, reward, and where a step's time goes:
waiting for the rollout (`timing/rollout_s`: in fully_async only what rollout did not hide),
training (`timing/train_s`) and the weight sync (`timing/weight_sync_s`). The ratio is the
median of the pairs' ratios, with their range.

Where the gain comes from: a synchronous step waits for its slowest episode (the tail of the
environment latencies) while the trainer idles, and trains while no episode runs. Fully
async keeps up to `(1 + max_staleness)` batches of episodes running, trains on the first
groups to finish, and lets the slow ones finish during later steps. What it costs: with
run.placement=auto, sync trains on every core (colocate) while fully_async gives the trainer
its own share of them (disaggregated: one core of two here), so its training takes longer;
the loop time falls by as much as the hidden waiting exceeds that, which the step split shows.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
from pathlib import Path

from loongsage.bench.launched import launch_run, logged, math_run
from loongsage.bench.repeat import add_repeats_argument, interleaved, pair_ratios, ratio_line, runs_note

log = logging.getLogger(__name__)

WORKLOAD = "loongsage.bench.async_workload"


def main(argv: list[str]) -> int:
    if "--simulate" in argv:
        from loongsage.bench import async_simulation

        return async_simulation.main([a for a in argv if a != "--simulate"])
    args = _parse(argv)
    fully_async = ["run.mode=fully_async", f"pipeline.window={args.window}", f"pipeline.max_staleness={args.max_staleness}"]
    with tempfile.TemporaryDirectory(prefix="loongsage-bench-async-") as tmp:
        sync_runs, fully_runs = interleaved(
            lambda i: _run(args, Path(tmp) / f"sync-{i}", ["run.mode=sync"]),
            lambda i: _run(args, Path(tmp) / f"fully_async-{i}", fully_async),
            args.repeats,
        )
    sync, fully = _medians(sync_runs), _medians(fully_runs)
    print(
        f"model={args.model} steps={args.steps} batch={args.prompts}x{args.group} episodes of {args.turns} turns; "
        f"fully_async: window={args.window} max_staleness={args.max_staleness}; "
        f"medians over {args.repeats} run(s) of each mode, interleaved"
    )
    print(
        f"{'mode':12s} {'first step s':>12s} {'loop s':>8s} {'s/step':>7s} {'trainer idle':>13s} {'rollout idle':>13s} "
        f"{'staleness':>10s} {'reward':>7s}   (loop: steps 2-{args.steps})"
    )
    for name, row in (("sync", sync), ("fully_async", fully)):
        print(
            f"{name:12s} {row['first_step_s']:12.1f} {row['loop_s']:8.1f} {row['loop_s'] / (args.steps - 1):7.2f} "
            f"{row['trainer_idle']:13.2f} {row['rollout_idle']:13.2f} {row['staleness']:10.2f} {row['reward']:7.3f}"
        )
    print(f"where a step's time goes (mean over steps 2-{args.steps}; medians over the runs):")
    for name, row, runs in (("sync", sync, sync_runs), ("fully_async", fully, fully_runs)):
        print(
            f"  {name:12s} waiting for rollout {row['wait_s']:6.2f} s + train {row['train_s']:6.2f} s + "
            f"weight sync {row['sync_s']:5.2f} s  (loop s {runs_note([r['loop_s'] for r in runs])})"
        )
    print(
        ratio_line(
            "sync / fully_async loop time", pair_ratios([r["loop_s"] for r in sync_runs], [r["loop_s"] for r in fully_runs])
        )
    )
    print(
        f"where it comes from: in sync the trainer idles {sync['trainer_idle']:.0%} of each step, waiting for the "
        f"slowest episode's tool calls, and the engines idle {sync['rollout_idle']:.0%} (tools running, or training); "
        f"fully_async trains on the first groups to finish while up to {1 + args.max_staleness} batches of episodes run, "
        f"so the trainer idles {fully['trainer_idle']:.0%} and the engines {fully['rollout_idle']:.0%}, with trainer and "
        f"engines on their own cores (run.placement=auto): the wait per step falls {sync['wait_s']:.2f} -> "
        f"{fully['wait_s']:.2f} s and training, on fewer cores and beside the rollout, takes "
        f"{fully['train_s']:.2f} s instead of {sync['train_s']:.2f} s"
    )
    return 0


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m loongsage.bench async")
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--steps", type=int, default=8, help="steps per run, at least 2: the first is timed apart")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--max-staleness", type=int, default=2)
    parser.add_argument("--window", default="window_gated")
    parser.add_argument("--seed", type=int, default=0)
    add_repeats_argument(parser)
    args = parser.parse_args(argv)
    if args.steps < 2:
        parser.error(f"--steps must be at least 2 (the first step is timed apart from the loop), got {args.steps}")
    return args


def _run(args: argparse.Namespace, run_dir: Path, mode: list[str]) -> dict[str, float]:
    episodes = args.prompts * args.group * (1 + args.max_staleness)
    overrides = [
        *math_run(args.model, run_dir, args.steps, args.seed),
        f"rollout.prompts_per_step={args.prompts}",
        f"rollout.group_size={args.group}",
        "rollout.max_context=1024",
        f"trainer.micro_batch_size={args.group}",
        "trainer.lr=1e-5",
        f"agent.name={WORKLOAD}:LatencyAgent",
        f"agent.max_concurrent={episodes}",
        f"rollout.max_running={episodes}",
        f"data.source={WORKLOAD}:latency_tasks",
        f"+data.options.turns={args.turns}",
        f"data.reward={WORKLOAD}:e_fraction_reward",
        "data.system_prompt=null",
        *mode,
    ]
    log.info("bench async: running %s (%s)", run_dir.name, mode[0])
    launch_run(overrides, mode[0])
    return _summary(run_dir)


def _summary(run_dir: Path) -> dict[str, float]:
    def after_first(by_step: dict[int, float]) -> list[float]:
        # staleness is logged by the asynchronous modes only
        return [value for step, value in sorted(by_step.items()) if step > 1] or [0.0]

    def mean(tag: str) -> float:
        found = after_first(logged(run_dir, tag))
        return sum(found) / len(found)

    step_s = logged(run_dir, "timing/step_s")
    return {
        "first_step_s": step_s[1],
        "loop_s": sum(after_first(step_s)),
        "trainer_idle": mean("async/trainer_idle_ratio"),
        "rollout_idle": mean("async/rollout_idle_ratio"),
        "staleness": mean("async/staleness_mean"),
        "reward": mean("rollout/reward_mean"),
        "wait_s": mean("timing/rollout_s"),
        "train_s": mean("timing/train_s"),
        "sync_s": mean("timing/weight_sync_s"),
    }


def _medians(runs: list[dict[str, float]]) -> dict[str, float]:
    """Each figure's median over the runs of one mode (each figure on its own, so the step split's
    medians need not add up to the median step exactly)."""
    return {key: statistics.median(run[key] for run in runs) for key in runs[0]}
