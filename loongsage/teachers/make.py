"""The teachers of the mopd recipe: the default model trained by GRPO on one arithmetic domain
each, made on this machine and cached (never downloaded).

    python -m loongsage.teachers.make [sum] [product] [--force]

    teacher-sum      math_grpo as it is: sums and differences of two numbers up to 9
    teacher-product  math_grpo on products of two numbers up to 9 (data.options.operators='*')

Each is `python launch.py recipe=math_grpo ...` (about 15 minutes on 2 cores), run into
<cache>/teachers/runs/<name> (its TensorBoard and rollouts stay there), whose last checkpoint's
policy becomes the model directory <cache>/teachers/teacher-<name>, with a teacher.json saying
how it was made. The model registry builds a missing one the same way on first use (`model:
teacher-sum`), before the run that needs it starts Ray.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import subprocess
import sys
from pathlib import Path

from loongsage.models.cache import building, cache_root, is_complete

log = logging.getLogger(__name__)

# name -> the launch overrides that train it
RECIPES = {
    "sum": ["recipe=math_grpo"],
    "product": ["recipe=math_grpo", "+data.options.operators='*'"],
}
# What an HF model directory needs from a checkpoint's trainer dir (no optimizer, no RNG).
MODEL_FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")
LAUNCH = Path(__file__).resolve().parent.parent.parent / "launch.py"


def teacher_dir(name: str) -> Path:
    return cache_root() / "teachers" / f"teacher-{name}"


def teacher_model(name: str) -> Path:
    """The teacher's model directory, made first if it is not cached (the registry's entry)."""
    model_dir = teacher_dir(name)
    if not is_complete(model_dir):
        make(name)
    return model_dir


def teacher_sum() -> Path:
    return teacher_model("sum")


def teacher_product() -> Path:
    return teacher_model("product")


def make(name: str, force: bool = False) -> Path:
    if name not in RECIPES:
        raise ValueError(f"no teacher recipe {name!r}; known: {', '.join(RECIPES)}")
    model_dir = teacher_dir(name)
    if is_complete(model_dir) and not force:
        log.info("teacher-%s is cached at %s", name, model_dir)
        return model_dir
    run_dir = cache_root() / "teachers" / "runs" / name
    if force and run_dir.exists():
        shutil.rmtree(run_dir)
    command = [sys.executable, str(LAUNCH), *RECIPES[name], f"run.name=teacher-{name}", f"run.dir={run_dir}"]
    log.info("making teacher-%s (once, about 15 minutes on 2 cores): %s", name, " ".join(command))
    # A run dir left by an interrupted make resumes where it stopped (its checkpoints).
    if (run_dir / "checkpoints" / "latest").exists():
        command.append("run.resume=true")
    subprocess.run(command, cwd=LAUNCH.parent, check=True)
    checkpoint = run_dir / "checkpoints" / (run_dir / "checkpoints" / "latest").read_text().strip() / "trainer"
    if force and model_dir.exists():
        shutil.rmtree(model_dir)
    with building(model_dir) as scratch:
        for file in checkpoint.iterdir():
            if file.name in MODEL_FILES or file.suffix == ".jinja":
                shutil.copy2(file, scratch / file.name)
        made = {"name": f"teacher-{name}", "command": " ".join(command[1:]), "checkpoint": str(checkpoint)}
        (scratch / "teacher.json").write_text(json.dumps(made, indent=2) + "\n")
    log.info("teacher-%s: %s", name, model_dir)
    return model_dir


def main(argv: list[str]) -> int:
    from loongsage.logs import setup_logging

    parser = argparse.ArgumentParser(prog="python -m loongsage.teachers.make", description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", default=list(RECIPES), help=f"of {', '.join(RECIPES)} (default: all)")
    parser.add_argument("--force", action="store_true", help="make it again even when cached")
    args = parser.parse_args(argv)
    setup_logging()
    for name in args.names:
        print(make(name, force=args.force))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
