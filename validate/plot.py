"""PNG of a run's smoothed reward against the reference band."""

from __future__ import annotations

from pathlib import Path


def plot_run_vs_band(reference: dict, run_rewards: dict[int, float], result: dict, out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = reference["steps"]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.fill_between(steps, reference["low"], reference["high"], alpha=0.25, label="reference band")
    ax.plot(steps, reference["center"], lw=1, label="reference (moving avg)")
    run_steps = sorted(run_rewards)
    ax.scatter(run_steps, [run_rewards[s] for s in run_steps], s=8, alpha=0.4, label="run (per step)")
    smoothed = result["smoothed"]
    ax.plot(sorted(smoothed), [smoothed[s] for s in sorted(smoothed)], lw=2, label="run (moving avg)")
    verdict = "PASS" if result["passed"] else "FAIL"
    ax.set_title(f"{reference['recipe']}: {reference['tag']}  {verdict} ({result['inside_frac']:.0%} inside)")
    ax.set_xlabel("step")
    ax.set_ylabel(reference["tag"])
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
