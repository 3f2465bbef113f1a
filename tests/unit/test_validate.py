from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from tests.paths import REPO_ROOT
from validate.band import compare, make_band, moving_average


def test_moving_average_is_trailing():
    assert moving_average([1, 2, 3, 4], 2) == [1, 1.5, 2.5, 3.5]


def test_band_is_symmetric_and_narrows_with_more_samples():
    center, low, high = make_band([[0.5] * 6], samples_per_step=16, window=3, z=3.0, floor=0.0)
    assert center == [0.5] * 6
    # 3 * sqrt(0.25 / 16) = 0.375 at step 1; 3 * sqrt(0.25 / 48) = 0.2165 once the window is full.
    assert high[0] - 0.5 == pytest.approx(0.375)
    assert high[5] - 0.5 == pytest.approx(0.21651, abs=1e-4)
    assert all(abs((h - c) - (c - lo)) < 1e-12 for c, lo, h in zip(center, low, high))


def reference(rewards):
    center, low, high = make_band([rewards], samples_per_step=64, window=5, z=3.0, floor=0.05)
    steps = list(range(1, len(rewards) + 1))
    return {
        "recipe": "r",
        "tag": "rollout/reward_mean",
        "steps": steps,
        "window": 5,
        "min_inside_frac": 0.9,
        "center": center,
        "low": low,
        "high": high,
    }


def test_band_widens_by_the_spread_between_recorded_seeds():
    one = make_band([[0.2] * 5], samples_per_step=64, window=5, z=0.0, floor=0.0)
    two = make_band([[0.2] * 5, [0.6] * 5], samples_per_step=64, window=5, z=0.0, floor=0.0)
    assert one[1] == pytest.approx([0.2] * 5) and one[2] == pytest.approx([0.2] * 5)  # z=0, floor=0: the band is the curve
    assert two[0] == pytest.approx([0.4] * 5)
    assert two[1] == pytest.approx([0.2] * 5) and two[2] == pytest.approx([0.6] * 5)


def test_compare_passes_a_nearby_run_and_fails_a_flat_one():
    rising = [0.1 + 0.02 * i for i in range(30)]
    ref = reference(rising)
    assert compare({s: r + 0.01 for s, r in zip(ref["steps"], rising)}, ref)["passed"]
    flat = compare({s: 0.1 for s in ref["steps"]}, ref)
    assert not flat["passed"] and flat["outside_steps"]


def test_missing_steps_fail():
    ref = reference([0.3] * 10)
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


def test_cli_names_a_dir_that_is_not_a_run(tmp_path):
    result = run_validate(tmp_path)
    assert result.returncode == 2 and "config.yaml" in result.stderr


def test_a_run_with_another_model_than_the_recipes_has_its_own_reference(tmp_path, monkeypatch):
    import json

    import validate.__main__ as cli

    monkeypatch.setattr(cli, "REFERENCES", tmp_path)
    assert cli.reference_file("toy", "tiny") == tmp_path / "toy.json"  # none yet: the recipe's own
    (tmp_path / "toy.json").write_text(json.dumps({"model": "tiny"}))
    assert cli.reference_file("toy", "tiny") == tmp_path / "toy.json"
    assert cli.reference_file("toy", "tiny-moe") == tmp_path / "toy@tiny-moe.json"


def test_a_run_with_another_algorithm_has_its_own_reference(tmp_path, monkeypatch):
    import json

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
    import json

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
