from __future__ import annotations

import json
import math
import random
import subprocess
import sys

import pytest
import yaml

from tests.paths import REPO_ROOT
from validate.band import compare, judge_checks, make_band, moving_average, seed_variance


def test_moving_average_is_trailing():
    assert moving_average([1, 2, 3, 4], 2) == [1, 1.5, 2.5, 3.5]


def test_band_is_symmetric_and_narrows_with_more_samples():
    band = make_band([[0.5] * 6], samples_per_step=16, window=3, z=3.0)
    assert band["center"] == [0.5] * 6
    # One run: 3 * sqrt(1 + 1/1) * sqrt(0.25 / 16) at step 1; the window holds 48 samples from step 3.
    assert band["high"][0] - 0.5 == pytest.approx(3 * math.sqrt(2) * math.sqrt(0.25 / 16))
    assert band["high"][5] - 0.5 == pytest.approx(3 * math.sqrt(2) * math.sqrt(0.25 / 48))
    assert all(abs((h - c) - (c - lo)) < 1e-12 for c, lo, h in zip(band["center"], band["low"], band["high"]))
    # The level is the mean over all 6 steps' 96 samples.
    assert band["level"]["high"] - 0.5 == pytest.approx(3 * math.sqrt(2) * math.sqrt(0.25 / 96))


def reference(runs, samples_per_step=64):
    steps = list(range(1, len(runs[0]) + 1))
    band = make_band(runs, samples_per_step=samples_per_step, window=5, z=3.0)
    return {"recipe": "r", "tag": "rollout/reward_mean", "steps": steps, "window": 5, "min_inside_frac": 0.9, **band}


def bernoulli_runs(rates, samples_per_step, seeds):
    """Per-step means of `samples_per_step` 0/1 rewards at each step's rate, one run per seed."""
    runs = []
    for seed in seeds:
        rng = random.Random(seed)
        runs.append([sum(rng.random() < rate for _ in range(samples_per_step)) / samples_per_step for rate in rates])
    return runs


def test_seeds_that_differ_only_by_sampling_add_no_seed_variance():
    runs = bernoulli_runs([0.3] * 200, samples_per_step=32, seeds=range(10))
    one_step_of_sampling = 0.3 * 0.7 / (32 * 5)
    assert seed_variance(runs, samples_per_step=32, window=5) < 0.2 * one_step_of_sampling


def test_seeds_that_learn_apart_widen_the_band_by_their_spread():
    slow, fast = [0.2 + 0.01 * i for i in range(20)], [0.2 + 0.03 * i for i in range(20)]
    alike = make_band([slow, slow, slow], samples_per_step=64, window=5, z=3.0)
    apart = make_band([slow, fast, slow], samples_per_step=64, window=5, z=3.0)
    assert alike["seed_variance"] == 0.0 and apart["seed_variance"] > 0.0
    assert all(a - b > 0.02 for a, b in zip(apart["high"][5:], alike["high"][5:]))


def test_compare_passes_a_nearby_run_and_fails_a_flat_one():
    rising = [0.1 + 0.02 * i for i in range(30)]
    ref = reference([rising])
    assert compare({s: r + 0.01 for s, r in zip(ref["steps"], rising)}, ref)["passed"]
    flat = compare({s: 0.1 for s in ref["steps"]}, ref)
    assert not flat["passed"] and flat["outside_steps"]


def test_a_run_that_never_solves_anything_fails_a_low_rate_recipe_on_its_level():
    # blackbox_swe's shape: 16 samples per step, 8 steps, a solve rate of 1 in 8. At each step the
    # curve's band reaches below 0, so only the mean over all 128 samples tells 0.125 from 0.
    ref = reference([[0.125] * 8] * 3, samples_per_step=16)
    never = compare({s: 0.0 for s in ref["steps"]}, ref)
    assert never["inside_frac"] == 1.0 and not never["level_inside"] and not never["passed"]
    ordinary = compare({s: [0.0625, 0.1875][s % 2] for s in ref["steps"]}, ref)
    assert ordinary["passed"], ordinary


def test_missing_steps_fail():
    ref = reference([[0.3] * 10])
    result = compare({s: 0.3 for s in range(1, 8)}, ref)
    assert result["missing_steps"] == [8, 9, 10] and not result["passed"]


def write_run(run_dir, rewards):
    from torch.utils.tensorboard import SummaryWriter

    run_dir.mkdir(parents=True)
    config = {"run": {"name": "toy"}, "model": {"name": "tiny"}, "rollout": {"prompts_per_step": 4, "group_size": 8}}
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    writer = SummaryWriter(str(run_dir / "tensorboard"))
    for step, reward in enumerate(rewards, start=1):
        writer.add_scalar("rollout/reward_mean", reward, step)
    writer.close()


def run_validate(*args):
    return subprocess.run(
        [sys.executable, "-m", "validate", *map(str, args)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )


def test_cli_records_then_checks_real_tensorboard_files(tmp_path):
    rising = [0.1 + 0.03 * i for i in range(20)]
    write_run(tmp_path / "ref", rising)
    ref_file = tmp_path / "toy.json"
    assert run_validate(tmp_path / "ref", "--record", "--reference", ref_file, "--command", "made by a test").returncode == 0

    write_run(tmp_path / "good", [r + 0.02 for r in rising])
    good = run_validate(tmp_path / "good", "--reference", ref_file)
    assert good.returncode == 0, good.stdout + good.stderr
    assert "PASS" in good.stdout
    assert (tmp_path / "good" / "validate.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    write_run(tmp_path / "bad", [0.0] * 20)
    bad = run_validate(tmp_path / "bad", "--reference", ref_file)
    assert bad.returncode == 1 and "FAIL" in bad.stdout
    assert (tmp_path / "bad" / "validate.png").exists()


def test_cli_adds_seeds_to_a_band_and_judges_its_kept_checks_again(tmp_path, capsys):
    import validate.__main__ as cli

    rising = [0.1 + 0.03 * i for i in range(20)]
    for seed, shift in enumerate([0.0, 0.02, -0.02, 0.01]):
        write_run(tmp_path / f"seed{seed}", [r + shift for r in rising])
    write_run(tmp_path / "weak", [0.1 + 0.01 * i for i in range(20)])
    ref_file = str(tmp_path / "toy.json")
    assert cli.main([str(tmp_path / "seed0"), "--record", "--add", "--reference", ref_file]) == 2
    assert "--add: " in capsys.readouterr().err  # nothing to add to yet
    assert cli.main([str(tmp_path / "seed0"), "--record", "--reference", ref_file, "--command", "seed 0"]) == 0
    assert "record at least 3" in capsys.readouterr().out

    seeds = [str(tmp_path / "seed1"), str(tmp_path / "seed2")]
    assert cli.main([*seeds, "--record", "--add", "--reference", ref_file, "--command", "seeds 1 2"]) == 0
    assert "each run against the band of the others: 3 of 3 pass" in capsys.readouterr().out
    assert cli.main([str(tmp_path / "weak"), "--reference", ref_file, "--keep-as", "weak", "--command", "half lr"]) == 1
    assert "kept as a check that must fail" in capsys.readouterr().out
    assert cli.main([str(tmp_path / "seed3"), "--reference", ref_file, "--keep-as", "ordinary", "--command", "seed 3"]) == 0
    other = tmp_path / "other"
    write_run(other, rising)
    config = yaml.safe_load((other / "config.yaml").read_text())
    (other / "config.yaml").write_text(yaml.safe_dump({**config, "rollout": {"prompts_per_step": 2, "group_size": 8}}))
    assert cli.main([str(other), "--record", "--add", "--reference", ref_file]) == 2
    assert "is a band of recipe, model, samples per step ('toy', 'tiny', 32)" in capsys.readouterr().err

    capsys.readouterr()
    assert cli.main([str(tmp_path / "seed3"), "--record", "--add", "--reference", ref_file, "--command", "seed 3"]) == 0
    out = capsys.readouterr().out
    assert "kept weak run (half lr): FAIL" in out and "kept ordinary run (seed 3): PASS" in out
    reference = json.loads((tmp_path / "toy.json").read_text())
    assert reference["runs"] == 4 and reference["command"] == "seed 0 ; seeds 1 2 ; seed 3"
    assert [check["kind"] for check in reference["checks"]] == ["weak", "ordinary"]
    assert (tmp_path / "toy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_reference_without_the_mean_rewards_band_is_refused_by_name(tmp_path, capsys):
    import validate.__main__ as cli

    write_run(tmp_path / "run", [0.3] * 6)
    old = {key: value for key, value in reference([[0.3] * 6]).items() if key != "level"}
    (tmp_path / "old.json").write_text(json.dumps(old))
    assert cli.main([str(tmp_path / "run"), "--reference", str(tmp_path / "old.json")]) == 2
    assert "old.json has no band for the mean reward" in capsys.readouterr().err


def test_cli_names_a_dir_that_is_not_a_run(tmp_path):
    result = run_validate(tmp_path)
    assert result.returncode == 2 and "config.yaml" in result.stderr


def test_a_run_with_another_model_than_the_recipes_has_its_own_reference(tmp_path, monkeypatch):
    import validate.__main__ as cli

    monkeypatch.setattr(cli, "REFERENCES", tmp_path)
    assert cli.reference_file("toy", "tiny") == tmp_path / "toy.json"  # none yet: the recipe's own
    (tmp_path / "toy.json").write_text(json.dumps({"model": "tiny"}))
    assert cli.reference_file("toy", "tiny") == tmp_path / "toy.json"
    assert cli.reference_file("toy", "tiny-moe") == tmp_path / "toy@tiny-moe.json"


def test_a_run_with_another_algorithm_has_its_own_reference(tmp_path, monkeypatch):
    import validate.__main__ as cli

    monkeypatch.setattr(cli, "REFERENCES", tmp_path)
    grpo, gspo = {"policy_loss": "ppo_clip", "clip_high": 0.28}, {"policy_loss": "gspo", "clip_high": 0.0004}
    (tmp_path / "toy.json").write_text(json.dumps({"model": "tiny", "algorithm": grpo}))
    (tmp_path / "toy+gspo.json").write_text(json.dumps({"model": "tiny", "algorithm": gspo}))
    assert cli.reference_file("toy", "tiny", grpo) == tmp_path / "toy.json"
    assert cli.reference_file("toy", "tiny", gspo) == tmp_path / "toy+gspo.json"
    cispo = {"policy_loss": "cispo", "clip_high": 0.28}
    assert cli.reference_file("toy", "tiny", cispo) is None  # a new band must be named, not overwrite toy.json
    message = cli._no_reference({"run": {"name": "toy"}, "model": {"name": "tiny"}, "algorithm": cispo})
    assert "toy.json: algorithm.policy_loss differ" in message
    assert "toy+gspo.json: algorithm.clip_high, algorithm.policy_loss differ" in message


def test_recording_over_another_algorithms_band_is_refused(tmp_path, monkeypatch, capsys):
    import validate.__main__ as cli

    monkeypatch.setattr(cli, "REFERENCES", tmp_path / "references")
    (tmp_path / "references").mkdir()
    (tmp_path / "references" / "toy.json").write_text(json.dumps({"model": "tiny", "algorithm": {"policy_loss": "ppo_clip"}}))
    write_run(tmp_path / "run", [0.1 + 0.03 * i for i in range(8)])
    config = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    (tmp_path / "run" / "config.yaml").write_text(yaml.safe_dump({**config, "algorithm": {"policy_loss": "gspo"}}))
    assert cli.main([str(tmp_path / "run"), "--record"]) == 2
    assert "toy.json is the toy band of another algorithm; name this one with --reference" in capsys.readouterr().err
    named = tmp_path / "references" / "toy+gspo.json"
    assert cli.main([str(tmp_path / "run"), "--record", "--reference", str(named)]) == 0
    assert json.loads(named.read_text())["algorithm"] == {"policy_loss": "gspo"}
    assert cli.main([str(tmp_path / "run")]) == 0  # found by its algorithm, and inside its own band


REFERENCES = sorted((REPO_ROOT / "validate" / "references").glob("*.json"))


@pytest.mark.parametrize("path", REFERENCES, ids=[path.stem for path in REFERENCES])
def test_every_kept_check_gets_its_verdict_from_its_band(path):
    reference = json.loads(path.read_text())
    for check, result in judge_checks(reference):
        must_pass = check["kind"] == "ordinary"
        assert result["passed"] == must_pass, f"{path.name}: {check['kind']} run ({check['command']}): {result}"


# The kinds of run each recipe's band was shown and kept. math_grpo and blackbox_swe keep no
# weak run: math_grpo at half the learning rate passes, and blackbox_swe's seeds differ so much
# that its band reaches below 0 (README, "Reference bands").
SHOWN = {"math_grpo": {"ordinary"}, "agentic_swe": {"ordinary", "weak"}, "blackbox_swe": {"ordinary"}}


@pytest.mark.parametrize("recipe", sorted(SHOWN))
def test_a_recipes_band_comes_from_three_seeds_and_keeps_the_runs_it_was_shown(recipe):
    reference = json.loads((REPO_ROOT / "validate" / "references" / f"{recipe}.json").read_text())
    assert reference["runs"] >= 3
    assert {check["kind"] for check in reference["checks"]} == SHOWN[recipe]
