"""python -m validate <run_dir> [--reference FILE] | python -m validate --record <run_dir>... --command "..."

Exit 0 when the run's reward curve sits inside its recipe's reference band, 1 when not;
a PNG of run vs band is written into the run dir either way. A recipe's reference is
validate/references/<recipe>.json, recorded with the recipe's own model; a run of the recipe
with another model (model=smollm2-moe) has its own, <recipe>@<model>.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

from loongsage.logs import setup_logging
from validate.band import compare, make_band
from validate.plot import plot_run_vs_band
from validate.scalars import read_scalar

REFERENCES = Path(__file__).parent / "references"
TAG = "rollout/reward_mean"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m validate", description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path, nargs="+", help="the run to check; with --record, one or more seeds")
    parser.add_argument(
        "--reference", type=Path, help="reference JSON (default: validate/references/<recipe>.json, or <recipe>@<model>.json)"
    )
    parser.add_argument("--record", action="store_true", help="make the run the recipe's new reference")
    parser.add_argument("--command", default="", help="with --record: the command that produced the run")
    args = parser.parse_args(argv)
    if len(args.run_dir) > 1 and not args.record:
        parser.error("give one run dir to check (several only with --record)")
    try:
        configs = [_run_config(run_dir) for run_dir in args.run_dir]
        runs = [read_scalar(run_dir, TAG) for run_dir in args.run_dir]
    except (FileNotFoundError, KeyError) as error:
        print(f"validate: {error}", file=sys.stderr)
        return 2
    if args.record:
        return _record(args, configs[0], runs)
    run_dir, config, rewards = args.run_dir[0], configs[0], runs[0]
    reference_path = args.reference or reference_file(config["run"]["name"], config["model"]["name"])
    if not reference_path.exists():
        print(
            f"validate: no reference for recipe {config['run']['name']!r} with model {config['model']['name']!r} "
            f"at {reference_path}",
            file=sys.stderr,
        )
        return 2
    reference = json.loads(reference_path.read_text())
    result = compare(rewards, reference)
    png = plot_run_vs_band(reference, rewards, result, run_dir / "validate.png")
    _report(reference, result, png)
    return 0 if result["passed"] else 1


def reference_file(recipe: str, model: str) -> Path:
    """<recipe>.json, unless it was recorded with another model: then <recipe>@<model>.json."""
    plain = REFERENCES / f"{recipe}.json"
    if plain.exists() and json.loads(plain.read_text()).get("model") != model:
        return REFERENCES / f"{recipe}@{model}.json"
    return plain


def _run_config(run_dir: Path) -> dict:
    path = run_dir / "config.yaml"
    if not path.exists():
        raise FileNotFoundError(f"{run_dir} has no config.yaml; is it a LoongSage run dir?")
    return yaml.safe_load(path.read_text())


def _report(reference: dict, result: dict, png: Path) -> None:
    verdict = "PASS" if result["passed"] else "FAIL"
    print(
        f"{verdict}: {result['inside_frac']:.0%} of {result['steps']} steps inside the {reference['recipe']} band "
        f"(need {reference['min_inside_frac']:.0%})"
    )
    if result["missing_steps"]:
        print(f"  missing steps: {result['missing_steps']}")
    if result["outside_steps"]:
        print(f"  outside at steps: {result['outside_steps']}")
    print(f"  plot: {png}")


def _record(args, config: dict, runs: list[dict[int, float]]) -> int:
    steps = sorted(set.intersection(*(set(run) for run in runs)))
    values = [[run[s] for s in steps] for run in runs]
    samples_per_step = config["rollout"]["prompts_per_step"] * config["rollout"]["group_size"]
    window, z, floor = 5, 3.0, 0.05
    center, low, high = make_band(values, samples_per_step, window, z, floor)
    reference = {
        "recipe": config["run"]["name"],
        "tag": TAG,
        "command": args.command,
        "model": config["model"]["name"],
        "samples_per_step": samples_per_step,
        "window": window,
        "z": z,
        "floor": floor,
        "min_inside_frac": 0.9,
        "steps": steps,
        "runs": len(runs),
        "reward_mean": values,
        "center": center,
        "low": low,
        "high": high,
    }
    out = args.reference or reference_file(reference["recipe"], reference["model"])
    out.write_text(json.dumps(reference, indent=1))
    print(f"recorded {len(steps)} steps of {TAG} from {len(runs)} run(s) as the reference for {reference['recipe']}: {out}")
    return 0


if __name__ == "__main__":
    setup_logging(results_on_stdout=True)  # stdout is the verdict
    sys.exit(main())
