"""Faults injected for real into a run, beside a clean run of the same config: what survives.

    python -m loongsage.bench chaos [--steps 16] [--seed 0] [--out DIR] [-- hydra overrides ...]

A tiny fully_async agentic run (agentic_swe on the tiny model, every episode in a sandbox) runs
twice, one after the other: clean, then with faults on a schedule drawn from --seed:
  engine      the embedded engine's process killed (SIGKILL) after step k
  trainer     a trainer rank's process killed after step k's checkpoint
  controller  launch.py killed after step k, then the same command run again
  reward      a reward call that hangs past data.reward_timeout_s (one item)
  sandbox     a sandboxed command that hangs past its time limit (one item)
Printed: each fault injected and whether the run survived it, the items lost and the items
trained twice (by item id, over the data stream, beside the steps a restart redid), and the
faulty run's wall time (both processes) over the clean run's. Every sample is logged to
rollouts.jsonl (logging.rollouts_per_step), which is how items are counted."""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import psutil

from loongsage.bench.chaos_faults import PLAN_ENV
from loongsage.bench.launched import REPO_ROOT, logged
from loongsage.controller.checkpoint import latest_checkpoint, load_controller_state

RUN = [
    "recipe=agentic_swe",
    "model=tiny",
    "warm_start.source=",
    "run.mode=fully_async",
    "rollout.prompts_per_step=2",
    "rollout.group_size=2",
    "agent.options.max_turns=2",
    "agent.options.max_tokens=16",
    "trainer.lr=1e-3",
    "run.save_every=1",
    "data.reward=loongsage.bench.chaos_faults:chaos_swe_reward",
    "data.reward_timeout_s=3",
    "logging.rollouts_per_step=1000",
    "logging.progress=true",
]
KILLS = ("engine", "trainer", "controller")
RESTART_TAGS = ("faults/engine_restarts", "faults/trainer_restarts")
HANG_S = 20.0  # how long the hung reward sleeps: well past data.reward_timeout_s


def main(argv: list[str]) -> int:
    args = _parse(argv)
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="loongsage-bench-chaos-"))
    overrides = [*RUN, f"run.steps={args.steps}", f"run.seed={args.seed}", *args.overrides]
    clean_s, clean_startup_s = _clean_run(overrides, out / "clean")
    plan = _plan(args.steps, args.seed, out / "faulty", overrides)
    faulty_s, injected, startups = _faulty_run(overrides, out / "faulty", plan)
    report = _report(out / "faulty", plan, injected)
    print(f"bench chaos: {args.steps} steps, seed {args.seed}, runs in {out}")
    print(f"{'fault':>10s} {'when':>18s} {'injected':>8s} {'survived':>8s}")
    for fault in report["faults"]:
        print(f"{fault['name']:>10s} {fault['when']:>18s} {fault['injected']:8d} {str(fault['survived']):>8s}")
    print(f"items trained: {report['trained']}; lost: {report['lost']}; trained twice: {report['twice']}")
    print(f"steps redone after a restart: {report['redone']}; stale groups dropped: {report['dropped']:.0f}")
    said = (out / "faulty" / "launch.log").read_text()
    trainer = ", ".join(f"{s} s" for s in re.findall(r"trainer restarted at step \d+ in ([\d.]+) s", said)) or "none"
    engine = ", ".join(f"{s} s" for s in re.findall(r"answers again after ([\d.]+) s", said)) or "none"
    print(
        f"what the faults cost: start-up to the first step {clean_startup_s:.0f} s clean, "
        f"{' + '.join(f'{s:.0f}' for s in startups)} s with faults (the controller kill's second start-up); "
        f"trainer restart {trainer}; engine back after {engine}"
    )
    print(f"wall time: clean {clean_s:.0f} s, with faults {faulty_s:.0f} s: {faulty_s / clean_s:.2f}x")
    survived = all(fault["survived"] for fault in report["faults"])
    return 0 if survived and report["lost"] == 0 and report["twice"] == 0 else 1


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m loongsage.bench chaos", description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=16, help="steps per run (>= 5: three kills at distinct steps)")
    parser.add_argument("--seed", type=int, default=0, help="the fault schedule's and the runs' seed")
    parser.add_argument("--out", default="", help="where the two run dirs go (default: a new temporary directory)")
    parser.add_argument("overrides", nargs="*", help="hydra overrides for both runs, after --")
    args = parser.parse_args(argv)
    if args.steps < 5:
        parser.error(f"--steps={args.steps}: the three kills need steps 1 to {args.steps - 2} to be three distinct steps (>= 5)")
    return args


def _plan(steps: int, seed: int, run_dir: Path, overrides: list[str]) -> dict:
    """Which step each kill follows, and which items' reward and sandbox hang (items of the first
    steps' share of the stream, so they are trained in any schedule)."""
    rng = random.Random(seed)
    at = rng.sample(range(1, steps - 1), len(KILLS))
    items = _stream_ids(overrides, count=2 * _prompts(overrides))
    reward_item, sandbox_item = rng.sample(items, 2)
    return {
        "kills": dict(zip(KILLS, at)),
        "env": {"dir": str(run_dir / "chaos"), "hang_s": HANG_S, "reward_hangs": [reward_item], "sandbox_hangs": [sandbox_item]},
    }


def _clean_run(overrides: list[str], run_dir: Path) -> tuple[float, float]:
    """The clean run's wall seconds, and its start-up's (to its first step)."""
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "launch.py", *overrides, f"run.dir={run_dir}"],
        cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines = []
    first_step = None
    for line in process.stderr:
        lines.append(line)
        if first_step is None and line.startswith("step "):
            first_step = time.monotonic() - started
    if process.wait() != 0:
        raise SystemExit(f"the clean run failed:\n{''.join(lines)[-3000:]}")
    return time.monotonic() - started, first_step


def _faulty_run(overrides: list[str], run_dir: Path, plan: dict) -> tuple[float, dict[str, int], list[float]]:
    """The run with the plan's faults; the controller's kill is followed by the same command. The
    seconds both processes took, how many of each kill were made, and each process's start-up
    (to its first step)."""
    env = {**os.environ, PLAN_ENV: json.dumps(plan["env"])}
    pending = dict(plan["kills"])
    injected: Counter[str] = Counter()
    startups: list[float] = []
    wall = 0.0
    run_dir.mkdir(parents=True, exist_ok=True)
    log = (run_dir / "launch.log").open("a")  # both processes' output
    while True:
        started = time.monotonic()
        process = subprocess.Popen(
            [sys.executable, "launch.py", *overrides, f"run.dir={run_dir}"],
            cwd=REPO_ROOT,
            env=env,
            stdout=log,  # the run's story; its warnings (what it gave up on) come on stderr
            stderr=subprocess.PIPE,  # with the progress lines: "step k/N | ..."
            text=True,
            start_new_session=True,  # only the bench's kill ends it
        )
        killed = _inject_while_running(
            process, run_dir, pending, injected, log, lambda since=started: startups.append(time.monotonic() - since)
        )
        process.wait()
        wall += time.monotonic() - started
        if not killed:
            log.close()
            if process.returncode != 0:
                raise SystemExit(f"the run with faults failed (exit {process.returncode}); its run dir: {run_dir}")
            return wall, dict(injected), startups


def _inject_while_running(
    process: subprocess.Popen, run_dir: Path, pending: dict[str, int], injected: Counter, log, first_step: Callable[[], None]
) -> bool:
    """Read the progress lines (into the log, with the warnings that come the same way); after
    step k, make the kills planned for k. True when the controller itself was killed (the caller
    starts it again). `first_step()` at the process's first progress line."""
    stepped = False
    for line in process.stderr:
        log.write(line)
        if not line.startswith("step "):
            continue
        if not stepped:
            first_step()
            stepped = True
        step = int(line.split()[1].split("/")[0])
        for fault in [name for name, at in pending.items() if at == step]:
            del pending[fault]
            injected[fault] += 1
            if fault == "controller":
                os.kill(process.pid, signal.SIGKILL)
                return True
            if fault == "trainer":
                _wait_for_checkpoint(run_dir, step)
            _kill_actor(process.pid, "EmbeddedEngineActor" if fault == "engine" else "TrainWorker")
    return False


def _kill_actor(launcher_pid: int, actor: str) -> None:
    for child in psutil.Process(launcher_pid).children(recursive=True):
        try:
            if f"ray::{actor}" in " ".join(child.cmdline()):
                child.kill()
                return
        except psutil.Error:
            continue
    raise SystemExit(f"bench chaos: no ray::{actor} process to kill")


def _wait_for_checkpoint(run_dir: Path, step: int) -> None:
    latest = run_dir / "checkpoints" / "latest"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if latest.exists() and latest.read_text().strip() >= f"step_{step:06d}":
            return
        time.sleep(0.05)
    raise SystemExit(f"bench chaos: step {step} was not saved within 120 s ({latest}); the trainer kill waits for it")


def _report(run_dir: Path, plan: dict, kills: dict[str, int]) -> dict:
    """Faults injected and survived; items by id over the data stream."""
    marks = [path.name.split(".")[0] for path in (run_dir / "chaos").glob("*")] if (run_dir / "chaos").is_dir() else []
    restarts = {tag: max(logged(run_dir, tag).values(), default=0.0) for tag in RESTART_TAGS}
    said = (run_dir / "launch.log").read_text()
    # Said in the run's log whether or not the item's group was trained (it may be dropped as stale).
    timeouts = said.count("reward timed out")
    # A trainer restart that lost only the trainer's memory redoes no step; one from an older
    # checkpoint pushes its weights and rolls out again (Controller._restart_trainer).
    redone_by_trainer = len(re.findall(r"trainer restarted at step \d+ in .*weight push", said))
    faults = [
        {
            "name": "engine",
            "when": f"after step {plan['kills']['engine']}",
            "injected": kills.get("engine", 0),
            "survived": restarts["faults/engine_restarts"] >= kills.get("engine", 0) > 0,
        },
        {
            "name": "trainer",
            "when": f"after step {plan['kills']['trainer']}",
            "injected": kills.get("trainer", 0),
            "survived": restarts["faults/trainer_restarts"] >= kills.get("trainer", 0) > 0,
        },
        {
            "name": "controller",
            "when": f"after step {plan['kills']['controller']}",
            "injected": kills.get("controller", 0),
            "survived": kills.get("controller", 0) > 0,  # and the same command then finished the run
        },
        {
            "name": "reward",
            "when": plan["env"]["reward_hangs"][0],
            "injected": marks.count("reward_hang"),
            "survived": marks.count("reward_hang") > 0 and timeouts > 0,
        },
        {
            "name": "sandbox",
            "when": plan["env"]["sandbox_hangs"][0],
            "injected": marks.count("sandbox_hang_killed") + marks.count("sandbox_hang_not_killed"),
            "survived": marks.count("sandbox_hang_killed") > 0 and marks.count("sandbox_hang_not_killed") == 0,
        },
    ]
    trained_in = _steps_of_items(run_dir / "rollouts.jsonl")
    data = load_controller_state(latest_checkpoint(run_dir))["data"]
    taken = _ids_at(run_dir, [(source, index) for source, count in data["next_index"].items() for index in range(count)])
    pending = set(_ids_at(run_dir, data["pending"]))
    # A group dropped for staleness (fully_async's window) is settled untrained by design: counted
    # apart, by number (the pipeline does not log its ids).
    dropped = max(logged(run_dir, "async/dropped_total").values(), default=0.0)
    untrained = [item for item in taken if item not in trained_in and item not in pending]
    return {
        "faults": faults,
        "trained": len(trained_in),
        "lost": max(len(untrained) - int(dropped), 0),
        "twice": sum(len(steps) > 1 for steps in trained_in.values()),
        "redone": redone_by_trainer + kills.get("controller", 0),
        "dropped": dropped,
    }


def _steps_of_items(rollouts: Path) -> dict[str, set[int]]:
    steps: dict[str, set[int]] = {}
    for line in rollouts.read_text().splitlines():
        row = json.loads(line)
        steps.setdefault(row["item_id"], set()).add(row["step"])
    return steps


def _prompts(overrides: list[str]) -> int:
    return int(next(o.split("=", 1)[1] for o in reversed(overrides) if o.startswith("rollout.prompts_per_step=")))


def _stream_ids(overrides: list[str], count: int) -> list[str]:
    """The first `count` item ids the runs take, from the config launch.py composes."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from loongsage.config import register

    register()
    with initialize_config_dir(config_dir=str(REPO_ROOT / "recipes"), version_base=None):
        config = OmegaConf.to_container(compose(config_name="config", overrides=overrides), resolve=False)
    stream = _data_stream(config)
    return [stream.take().id for _ in range(count)]


def _ids_at(run_dir: Path, cursors: list) -> list[str]:
    """The item ids at data-stream cursors (source, index) of a run, as its controller reads them."""
    from omegaconf import OmegaConf

    stream = _data_stream(OmegaConf.to_container(OmegaConf.load(run_dir / "config.yaml"), resolve=False))
    return [stream.sources[source].item_at(int(index)).id for source, index in cursors]


def _data_stream(config: dict):
    from loongsage.config import DataConfig
    from loongsage.controller.data_stream import DataStream

    data = DataConfig(**{key: value for key, value in config["data"].items() if key != "mix"})
    return DataStream(data, config["rollout"]["prompts_per_step"], config["run"]["seed"])
