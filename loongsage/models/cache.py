"""Where fetched and generated models live on disk."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def cache_root() -> Path:
    return Path(os.environ.get("LOONGSAGE_CACHE", Path.home() / ".cache" / "loongsage"))


def is_complete(model_dir: Path) -> bool:
    return (model_dir / "config.json").exists() and (model_dir / "model.safetensors").exists()


@contextmanager
def building(model_dir: Path) -> Iterator[Path]:
    """Yield a scratch dir that becomes `model_dir` only if the body succeeds.

    A crash or Ctrl-C half way leaves no half-written model behind, and two processes
    racing to build the same model both end with a complete one.
    """
    model_dir.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{model_dir.name}-", dir=model_dir.parent))
    try:
        yield scratch
        if is_complete(model_dir):
            return
        try:
            scratch.rename(model_dir)
        except OSError:
            if not is_complete(model_dir):
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
