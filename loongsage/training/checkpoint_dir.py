"""All-or-nothing checkpoint directories: written under a scratch name, then renamed."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# A critic's part of a trainer checkpoint (algorithm.advantage=gae): its backend's layout, one level down.
CRITIC_DIR = "critic"


@contextmanager
def atomic_dir(target: str | os.PathLike) -> Iterator[Path]:
    """Yield an empty scratch dir beside `target`; it replaces `target` only if the body
    succeeds. A crash mid-save leaves `target` as it was (absent or the previous
    checkpoint) plus, at worst, a hidden scratch dir — never a half checkpoint."""
    target = Path(target).resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    tag = uuid.uuid4().hex[:8]
    scratch = target.parent / f".{target.name}.tmp-{tag}"
    scratch.mkdir()
    try:
        yield scratch
        _replace_dir(scratch, target, target.parent / f".{target.name}.old-{tag}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _replace_dir(new: Path, target: Path, graveyard: Path) -> None:
    # rename() cannot replace a non-empty directory, so the old one is moved aside first;
    # between the two renames only the complete old or complete new checkpoint exists.
    if target.exists():
        target.rename(graveyard)
    new.rename(target)
    shutil.rmtree(graveyard, ignore_errors=True)
