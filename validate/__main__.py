"""python -m validate <run_dir> [--reference FILE] [--keep-as ordinary|weak --command "..."]
python -m validate --record <run_dir>... [--add] --command "..."

Exit 0 when the run's reward curve and level sit inside its recipe's reference band, 1 when not;
a PNG of run vs band is written into the run dir either way. A recipe's reference is
validate/references/<recipe>.json, recorded with the recipe's own model; a run of the recipe
with another model (model=smollm2-moe) has its own, <recipe>@<model>.json.

A reference also keeps checks: runs not used for the band, each kept as an ordinary run (another
seed, which must pass) or a weak one (half the learning rate, no warm start: which must fail).
The unit tests judge every kept check against its band, so a band that stops telling them apart
fails CI.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

from loongsage.logs import setup_logging
from validate.band import compare, judge_checks, make_band
from validate.plot import plot_reference, plot_run_vs_band
from validate.scalars import read_scalar

REFERENCES = Path(__file__).parent / "references"
TAG = "rollout/reward_mean"
# What a kept check must do against its band: an ordinary run passes, a weak one fails.
CHECK_KINDS = ("ordinary", "weak")
WINDOW, Z, MIN_INSIDE_FRAC = 5, 3.0, 0.9


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m validate", description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path, nargs="+", help="the run to check; with --record, one or more seeds")
    parser.add_argument(
        "--reference",
        type=Path,
        help="reference JSON (default: the recipe's recorded with the run's model and algorithm: validate/references/"
        "<recipe>.json, <recipe>@<model>.json or <recipe>+<variant>.json)",
    )
    parser.add_argument("--record", action="store_true", help="make the run the recipe's new reference")
    parser.add_argument("--add", action="store_true", help="with --record: add the runs to those the band has")
    parser.add_argument(
        "--keep-as",
        choices=CHECK_KINDS,
        help="keep the judged run in its reference as a check that must pass (ordinary) or fail (weak)",
    )
    parser.add_argument("--command", default="", help="with --record or --keep-as: the command that produced the run")
    args = parser.parse_args(argv)
    if len(args.run_dir) > 1 and not args.record:
        parser.error("give one run dir to check (several only with --record)")
    if args.add and not args.record:
        parser.error("--add goes with --record")
    if args.keep_as and args.record:
        parser.error("--keep-as keeps a judged run; a recorded one is part of the band")
    try:
        configs = [_run_config(run_dir) for run_dir in args.run_dir]
        runs = [read_scalar(run_dir, TAG) for run_dir in args.run_dir]
    except (FileNotFoundError, KeyError) as error:
        print(f"validate: {error}", file=sys.stderr)
        return 2
    if args.record:
        return _record(args, configs[0], runs)
    run_dir, config, rewards = args.run_dir[0], configs[0], runs[0]
    reference_path = args.reference or reference_file(config["run"]["name"], config["model"]["name"], config.get("algorithm"))
    if reference_path is None or not reference_path.exists():
        print(f"validate: {_no_reference(config)}", file=sys.stderr)
        return 2
    reference = json.loads(reference_path.read_text())
    if "level" not in reference:
        print(
            f"validate: {reference_path} has no band for the mean reward (recorded before it was judged); "
            f"record it again from its runs (python -m validate --record RUN_DIR...)",
            file=sys.stderr,
        )
        return 2
    result = compare(rewards, reference)
    png = plot_run_vs_band(reference, rewards, result, run_dir / "validate.png")
    _report(reference, result, png)
    if args.keep_as:
        steps = sorted(rewards)
        check = {"kind": args.keep_as, "command": args.command, "steps": steps, "reward_mean": [rewards[s] for s in steps]}
        reference["checks"] = [*reference.get("checks", []), check]
        reference_path.write_text(json.dumps(reference, indent=1))
        plot_reference(reference, reference_path.with_suffix(".png"))
        print(f"kept as a check that must {'pass' if args.keep_as == 'ordinary' else 'fail'}: {reference_path}")
    return 0 if result["passed"] else 1


def reference_file(recipe: str, model: str, algorithm: dict | None = None) -> Path | None:
    """The reference of this recipe recorded with this model and, when given, this algorithm
    section (a run of `recipe=math_grpo algorithm=gspo` has its own band): <recipe>.json,
    <recipe>@<model>.json or <recipe>+<variant>.json, whichever says so. None recorded yet: where
    the recipe's own goes (<recipe>.json, or <recipe>@<model>.json when <recipe>.json is another
    model's), or None when <recipe>.json is this model's with another algorithm (name the new
    one with --reference)."""
    for path in _references_of(recipe):
        recorded = json.loads(path.read_text())
        if recorded.get("model") == model and (algorithm is None or recorded.get("algorithm") == algorithm):
            return path
    plain = REFERENCES / f"{recipe}.json"
    if not plain.exists():
        return plain
    if json.loads(plain.read_text()).get("model") != model:
        return REFERENCES / f"{recipe}@{model}.json"
    return None


def _references_of(recipe: str) -> list[Path]:
    """The recipe's own reference first, then those of other models and algorithm variants."""
    named = sorted(REFERENCES.glob(f"{recipe}[@+]*.json"))
    plain = REFERENCES / f"{recipe}.json"
    return ([plain] if plain.exists() else []) + named


def _no_reference(config: dict) -> str:
    recipe, model, algorithm = config["run"]["name"], config["model"]["name"], config.get("algorithm") or {}
    lines = [f"no reference for recipe {recipe!r} with model {model!r} and this run's algorithm section"]
    for path in _references_of(recipe):
        recorded = json.loads(path.read_text())
        theirs = recorded.get("algorithm") or {}
        differs = sorted(key for key in set(theirs) | set(algorithm) if theirs.get(key) != algorithm.get(key))
        what = (
            f"model {recorded.get('model')!r}"
            if recorded.get("model") != model
            else f"algorithm.{', algorithm.'.join(differs)} differ"
        )
        lines.append(f"  {path.name}: {what}")
    return "\n".join(lines)


def _run_config(run_dir: Path) -> dict:
    path = run_dir / "config.yaml"
    if not path.exists():
        raise FileNotFoundError(f"{run_dir} has no config.yaml; is it a LoongSage run dir?")
    return yaml.safe_load(path.read_text())


def _report(reference: dict, result: dict, png: Path) -> None:
    verdict = "PASS" if result["passed"] else "FAIL"
    level = reference["level"]
    print(
        f"{verdict}: {result['inside_frac']:.0%} of {result['steps']} steps inside the {reference['recipe']} band "
        f"(need {reference['min_inside_frac']:.0%}); mean reward {result['level']:.3f} "
        f"{'inside' if result['level_inside'] else 'outside'} {level['low']:.3f}-{level['high']:.3f}"
    )
    if result["missing_steps"]:
        print(f"  missing steps: {result['missing_steps']}")
    if result["outside_steps"]:
        print(f"  outside at steps: {result['outside_steps']}")
    print(f"  plot: {png}")


def _record(args, config: dict, runs: list[dict[int, float]]) -> int:
    out = args.reference or reference_file(config["run"]["name"], config["model"]["name"], config.get("algorithm"))
    if out is None:
        print(
            f"validate: {REFERENCES / (config['run']['name'] + '.json')} is the {config['run']['name']} band of another "
            f"algorithm; name this one with --reference {REFERENCES}/{config['run']['name']}+<variant>.json",
            file=sys.stderr,
        )
        return 2
    previous = json.loads(out.read_text()) if out.exists() else None
    samples_per_step = config["rollout"]["prompts_per_step"] * config["rollout"]["group_size"]
    commands = [args.command]
    if args.add:
        if previous is None:
            print(f"validate: --add: {out} has no runs yet", file=sys.stderr)
            return 2
        theirs = (previous["recipe"], previous["model"], previous["samples_per_step"])
        if theirs != (config["run"]["name"], config["model"]["name"], samples_per_step):
            print(
                f"validate: --add: {out} is a band of recipe, model, samples per step {theirs}; "
                f"{args.run_dir[0]} is a run of {(config['run']['name'], config['model']['name'], samples_per_step)}",
                file=sys.stderr,
            )
            return 2
        runs = [dict(zip(previous["steps"], values)) for values in previous["reward_mean"]] + runs
        commands = [previous["command"], args.command]
    steps = sorted(set.intersection(*(set(run) for run in runs)))
    values = [[run[s] for s in steps] for run in runs]
    reference = {
        "recipe": config["run"]["name"],
        "tag": TAG,
        "command": " ; ".join(command for command in commands if command),
        "model": config["model"]["name"],
        "samples_per_step": samples_per_step,
        "window": WINDOW,
        "z": Z,
        "min_inside_frac": MIN_INSIDE_FRAC,
        "steps": steps,
        "runs": len(runs),
        "reward_mean": values,
        **make_band(values, samples_per_step, WINDOW, Z),
        # Which runs this band judges: a run of the recipe with another algorithm has its own.
        "algorithm": config.get("algorithm"),
        "leave_one_out": _leave_one_out(values, samples_per_step, steps),
        "checks": (previous or {}).get("checks", []) if args.add else [],
    }
    out.write_text(json.dumps(reference, indent=1))
    plot_reference(reference, out.with_suffix(".png"))
    print(f"recorded {len(steps)} steps of {TAG} from {len(runs)} run(s) as the reference for {reference['recipe']}: {out}")
    if len(runs) < 3:
        print(f"  {len(runs)} run(s) cannot show how far seeds differ: record at least 3 (--add adds seeds)")
    if reference["leave_one_out"]:
        passed = sum(reference["leave_one_out"])
        print(f"  each run against the band of the others: {passed} of {len(runs)} pass")
    for check, result in judge_checks(reference):
        print(
            f"  kept {check['kind']} run ({check['command']}): {'PASS' if result['passed'] else 'FAIL'}"
            + ("" if result["passed"] == (check["kind"] == "ordinary") else ", which it must not")
        )
    return 0


def _leave_one_out(values: list[list[float]], samples_per_step: int, steps: list[int]) -> list[bool]:
    """Whether each recorded run passes the band of the others: the false-fail check the band can
    make of itself. Empty below 3 runs (one other run is no band)."""
    if len(values) < 3:
        return []
    verdicts = []
    for i, own in enumerate(values):
        others = values[:i] + values[i + 1 :]
        band = {
            "steps": steps,
            "window": WINDOW,
            "min_inside_frac": MIN_INSIDE_FRAC,
            **make_band(others, samples_per_step, WINDOW, Z),
        }
        verdicts.append(compare(dict(zip(steps, own)), band)["passed"])
    return verdicts


if __name__ == "__main__":
    setup_logging(results_on_stdout=True)  # stdout is the verdict
    sys.exit(main())
