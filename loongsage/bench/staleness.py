"""Off-policy corrections as staleness grows: which keeps learning.

    python -m loongsage.bench staleness [--model smollm2-135m] [--steps 12] [--staleness 1 2 4]
                                        [--corrections none tis m2po opsm] [--last 4] [--seed 0]
                                        [--out DIR] [-- hydra overrides ...]

The same fully_async math_grpo run (one seed, one data stream) at each pipeline.max_staleness,
with each correction of the stale tokens:
  none  decoupled PPO's own anchor only (algorithm.proximal=recompute), nothing reweighted
  tis   truncated importance weights pi_prox / pi_behav per token (at 2.0, as slime's TIS)
  m2po  algorithm=m2po: the batch's most off-policy tokens masked until M2 <= 0.04
  opsm  algorithm=opsm: negative-advantage sequences that diverged past 0.1 dropped
Printed per cell: the final reward (mean of the last --last steps), train/mismatch_k3_kl (mean
over steps: how far the trainer's log-probs sit from the tokens' samplers'), the staleness the
run reached (async/staleness_mean) and what the correction took out (train/is_clip_frac,
train/stale_filtered_frac). The reward curves go to <out>/staleness.png. Each run is a fresh
launch.py process; the cells run one after another. Not a timing: the runs are the measurement.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
from pathlib import Path

from loongsage.bench.launched import launch_run, logged, math_run

log = logging.getLogger(__name__)

CORRECTIONS = {
    "none": [],
    "tis": ["algorithm.is_level=token", "algorithm.is_mode=truncate", "algorithm.is_high=2.0"],
    "m2po": ["algorithm=m2po"],
    "opsm": ["algorithm=opsm"],
}
# What each correction took out of the gradient, as the run logs it.
TAKEN_OUT = {"tis": "train/is_clip_frac", "m2po": "train/stale_filtered_frac", "opsm": "train/stale_filtered_frac"}


def main(argv: list[str]) -> int:
    args = _parse(argv)
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="loongsage-bench-staleness-"))
    cells = {}
    for staleness in args.staleness:
        for correction in args.corrections:
            run_dir = out / f"staleness{staleness}-{correction}"
            log.info("bench staleness: max_staleness=%d, %s (%s)", staleness, correction, run_dir)
            launch_run(_overrides(args, staleness, correction, run_dir), f"max_staleness={staleness} {correction}")
            cells[staleness, correction] = _cell(run_dir, correction, args.last)
    print(f"model={args.model} steps={args.steps} seed={args.seed}, run.mode=fully_async; runs in {out}")
    print(f"{'staleness':>9s} {'correction':>10s} {'final reward':>12s} {'mismatch k3':>11s} {'reached':>7s} {'taken out':>9s}")
    for (staleness, correction), cell in cells.items():
        print(
            f"{staleness:9d} {correction:>10s} {cell['final_reward']:12.3f} {cell['mismatch_k3']:11.2e} "
            f"{cell['staleness']:7.2f} {cell['taken_out']:9.3f}"
        )
    print(f"reward curves: {_plot(cells, out / 'staleness.png')}")
    return 0


def _overrides(args: argparse.Namespace, staleness: int, correction: str, run_dir: Path) -> list[str]:
    return [
        *math_run(args.model, run_dir, args.steps, args.seed),
        "run.mode=fully_async",
        f"pipeline.max_staleness={staleness}",
        *CORRECTIONS[correction],
        *args.overrides,
    ]


def _cell(run_dir: Path, correction: str, last: int) -> dict:
    rewards = logged(run_dir, "rollout/reward_mean")
    steps = sorted(rewards)
    final = [rewards[step] for step in steps[-last:]]

    def mean(tag: str) -> float:
        values = list(logged(run_dir, tag).values())
        return sum(values) / len(values) if values else 0.0

    return {
        "rewards": rewards,
        "final_reward": sum(final) / len(final),
        "mismatch_k3": mean("train/mismatch_k3_kl"),
        "staleness": mean("async/staleness_mean"),
        "taken_out": mean(TAKEN_OUT[correction]) if correction in TAKEN_OUT else 0.0,
    }


def _plot(cells: dict, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stalenesses = sorted({staleness for staleness, _ in cells})
    fig, axes = plt.subplots(1, len(stalenesses), figsize=(4.5 * len(stalenesses), 3.8), sharey=True, squeeze=False)
    for ax, staleness in zip(axes[0], stalenesses):
        for (cell_staleness, correction), cell in cells.items():
            if cell_staleness == staleness:
                steps = sorted(cell["rewards"])
                ax.plot(steps, [cell["rewards"][s] for s in steps], marker=".", label=correction)
        ax.set_title(f"pipeline.max_staleness={staleness}")
        ax.set_xlabel("step")
    axes[0][0].set_ylabel("rollout/reward_mean")
    axes[0][-1].legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m loongsage.bench staleness", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--staleness", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--corrections", nargs="+", choices=sorted(CORRECTIONS), default=list(CORRECTIONS))
    parser.add_argument("--last", type=int, default=4, help="steps the final reward averages")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="where the runs go (default: a new temporary directory, kept)")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for every run (e.g. rollout.prompts_per_step=4)")
    return parser.parse_args(argv)
