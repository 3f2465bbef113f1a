"""PNGs: a run's smoothed reward against the reference band, and a reference with what it was
made from and checked against."""

from __future__ import annotations

from pathlib import Path

from validate.band import judge_checks, moving_average


def plot_run_vs_band(reference: dict, run_rewards: dict[int, float], result: dict, out: Path) -> Path:
    fig, ax = _band_axes(reference)
    run_steps = sorted(run_rewards)
    ax.scatter(run_steps, [run_rewards[s] for s in run_steps], s=8, alpha=0.4, label="run (per step)")
    smoothed = result["smoothed"]
    ax.plot(sorted(smoothed), [smoothed[s] for s in sorted(smoothed)], lw=2, label="run (moving avg)")
    ax.hlines(result["level"], reference["steps"][0], reference["steps"][-1], colors="C1", linestyles="--", label="run (mean)")
    ax.set_title(f"{reference['recipe']}: {reference['tag']}  {_verdict(result)}")
    return _save(fig, ax, out)


def plot_reference(reference: dict, out: Path) -> Path:
    """The band, the recorded runs' moving averages, and each kept check's with its verdict."""
    fig, ax = _band_axes(reference)
    steps = reference["steps"]
    for i, rewards in enumerate(reference["reward_mean"]):
        ax.plot(
            steps, moving_average(rewards, reference["window"]), lw=0.8, color="gray", label="recorded runs" if i == 0 else None
        )
    styles = {"ordinary": "-", "weak": "--"}
    for check, result in judge_checks(reference):
        smoothed = result["smoothed"]
        label = f"kept {check['kind']} run: {_verdict(result)}"
        ax.plot(sorted(smoothed), [smoothed[s] for s in sorted(smoothed)], lw=1.8, linestyle=styles[check["kind"]], label=label)
    ax.set_title(f"{reference['recipe']}: band from {reference['runs']} run(s), {reference['tag']}")
    return _save(fig, ax, out)


def _band_axes(reference: dict):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = reference["steps"]
    fig, ax = plt.subplots(figsize=(9, 5))
    ax.fill_between(steps, reference["low"], reference["high"], alpha=0.25, label="reference band")
    ax.plot(steps, reference["center"], lw=1, label="reference (moving avg)")
    level = reference["level"]
    ax.hlines([level["low"], level["high"]], steps[0], steps[-1], colors="gray", linestyles=":", label="band of the mean")
    ax.set_ylim(-0.1, 1.05)
    ax.set_xlabel("step")
    ax.set_ylabel(reference["tag"])
    return fig, ax


def _verdict(result: dict) -> str:
    return (
        f"{'PASS' if result['passed'] else 'FAIL'} ({result['inside_frac']:.0%} inside, "
        f"mean {result['level']:.2f} {'inside' if result['level_inside'] else 'outside'})"
    )


def _save(fig, ax, out: Path) -> Path:
    import matplotlib.pyplot as plt

    ax.legend(loc="best", fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
