"""What `bench async` reads back from a run's TensorBoard files: the first step (the pipeline's
fill) timed apart, the loop time and every per-step mean over steps 2..N only."""

from __future__ import annotations

import pytest

from loongsage.bench import asynchrony


def write_steps(run_dir, per_step: dict[str, list[float]]) -> None:
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(run_dir / "tensorboard"))
    for tag, values in per_step.items():
        for step, value in enumerate(values, start=1):
            writer.add_scalar(tag, value, step)
    writer.close()


def test_the_first_step_is_timed_apart_and_left_out_of_the_loop_and_the_means(tmp_path):
    write_steps(
        tmp_path,
        {
            "timing/step_s": [10.0, 2.0, 3.0, 2.5],
            "timing/train_s": [9.0, 1.0, 2.0, 3.0],
            "async/staleness_mean": [0.0, 2.0, 1.0, 2.0],
        },
    )
    summary = asynchrony._summary(tmp_path)
    assert summary["first_step_s"] == 10.0
    assert summary["loop_s"] == pytest.approx(7.5)
    assert summary["train_s"] == pytest.approx(2.0)
    assert summary["staleness"] == pytest.approx(5.0 / 3)


def test_a_metric_only_the_asynchronous_modes_log_reads_as_zero_in_sync(tmp_path):
    write_steps(tmp_path, {"timing/step_s": [7.0, 5.0, 6.0]})
    summary = asynchrony._summary(tmp_path)
    assert (summary["loop_s"], summary["staleness"]) == (11.0, 0.0)


def test_one_step_leaves_no_loop_to_time_and_is_refused_by_name(capsys):
    with pytest.raises(SystemExit):
        asynchrony._parse(["--steps", "1"])
    assert "--steps must be at least 2" in capsys.readouterr().err
