"""What a person watches: TensorBoard scalars, a console progress line, and a JSONL of
sampled rollouts to read."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from loongsage.config import LoggingConfig
from loongsage.sample import Sample

REVERSE_KL = "teacher/reverse_kl/"


class Monitor:
    def __init__(self, cfg: LoggingConfig, run_dir: Path, total_steps: int, start_step: int):
        self.cfg = cfg
        self.total_steps = total_steps
        self.start_step = start_step
        self.started = time.perf_counter()
        self.rollouts_path = run_dir / "rollouts.jsonl"
        _drop_lines_after(self.rollouts_path, start_step)
        self.writer = None
        if cfg.tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            # purge_step discards events a crashed run logged after its last checkpoint.
            self.writer = SummaryWriter(str(run_dir / "tensorboard"), purge_step=start_step + 1)

    def log(self, step: int, metrics: dict[str, float], samples: list[Sample]) -> None:
        self.scalars(step, metrics)
        self._write_rollouts(step, samples)
        if self.cfg.progress:
            # Not a log record: the run's terminal display (logging.progress turns it off), bare,
            # on stderr beside the warm start's, so that stdout holds the run's [loongsage] story.
            print(self._progress_line(step, metrics), file=sys.stderr, flush=True)

    def start_clock(self) -> None:
        """ETAs count from here: work before the first step (a warm start) is not a step."""
        self.started = time.perf_counter()

    def scalars(self, step: int, metrics: dict[str, float]) -> None:
        if self.writer is not None:
            for tag, value in metrics.items():
                self.writer.add_scalar(tag, value, step)
            self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()

    def _progress_line(self, step: int, metrics: dict[str, float]) -> str:
        done = step - self.start_step
        elapsed = time.perf_counter() - self.started
        eta = elapsed / done * (self.total_steps - step) if done else 0.0
        # Only when some grading broke: then a reward of 0 may not be the model's.
        grading_errors = metrics.get("rollout/grading_errors", 0.0)
        # With teachers: each one's reverse KL, the number distillation drives down.
        teachers = "".join(
            f" | kl({key.rsplit('/', 1)[1]}) {value:.3f}" for key, value in sorted(metrics.items()) if key.startswith(REVERSE_KL)
        )
        return (
            f"step {step}/{self.total_steps} | reward {metrics.get('rollout/reward_mean', 0.0):.3f}"
            + (f" (grading errors {grading_errors:.0f})" if grading_errors else "")
            + teachers
            + f" | len {metrics.get('rollout/response_len_mean', 0.0):.1f}"
            f" | loss {metrics.get('train/loss', 0.0):+.4f}"
            f" | k3 {metrics.get('train/mismatch_k3_kl', 0.0):.1e}"
            f" | step {metrics.get('timing/step_s', 0.0):.1f}s | ETA {_clock(eta)}"
        )

    def _write_rollouts(self, step: int, samples: list[Sample]) -> None:
        if not self.cfg.rollouts_per_step:
            return
        with self.rollouts_path.open("a", encoding="utf-8") as out:
            for sample in samples[: self.cfg.rollouts_per_step]:
                record = {
                    "step": step,
                    "group_id": sample.group_id,
                    "item_id": sample.metadata.get("item_id"),
                    "prompt": sample.prompt_text,
                    "response": sample.response_text,
                    "label": sample.label,
                    "reward": sample.reward,
                    "advantage": sample.advantage,
                    **({"teacher_advantage_mean": _mean(sample.token_advantages)} if sample.token_advantages else {}),
                    "finish_reason": sample.finish_reason,
                    "weight_version": sample.weight_versions[0] if sample.weight_versions else None,
                    **({"reward_error": sample.metadata["reward_error"]} if "reward_error" in sample.metadata else {}),
                    **({"grading_error": sample.metadata["grading_error"]} if "grading_error" in sample.metadata else {}),
                    **_episode_fields(sample.metadata),
                }
                out.write(json.dumps(record) + "\n")


EPISODE_FIELDS = ("exit_status", "episode_turns", "episode_branches", "hosted_tools_dropped")


def _episode_fields(metadata: dict) -> dict:
    """An agent episode's ending and size; the tail of the program's output when it ended in an
    error, so that what went wrong can be read in rollouts.jsonl."""
    fields = {name: metadata[name] for name in EPISODE_FIELDS if metadata.get(name)}
    if metadata.get("exit_status") == "error":
        fields["agent_log"] = metadata.get("agent_log", [])
    return fields


def _drop_lines_after(path: Path, step: int) -> None:
    """On resume, forget rollouts of steps that the checkpoint does not cover."""
    if not path.exists():
        return
    kept = [line for line in path.read_text(encoding="utf-8").splitlines() if line and json.loads(line)["step"] <= step]
    path.write_text("".join(line + "\n" for line in kept), encoding="utf-8")


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"
