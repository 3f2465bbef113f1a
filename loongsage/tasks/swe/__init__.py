"""SWE tasks: small repositories with one injected bug, graded by their pytest tests in a
fresh sandbox (`python -m loongsage.tasks.swe check|grade`)."""
from __future__ import annotations

from pathlib import Path

from loongsage.tasks.swe.instance import Prediction, SweFormatError, SweTask, load_predictions, load_tasks

BUNDLED_TASKS_PATH = Path(__file__).parent / "data" / "swe_tasks.jsonl"

__all__ = ["BUNDLED_TASKS_PATH", "Prediction", "SweFormatError", "SweTask", "load_predictions", "load_tasks"]
