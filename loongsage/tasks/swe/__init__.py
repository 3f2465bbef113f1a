"""SWE tasks: small repositories with one injected bug, graded by their pytest tests in a
fresh sandbox (`python -m loongsage.tasks.swe check|grade`)."""

from __future__ import annotations

from loongsage.tasks.swe.instance import Prediction, SweFormatError, SweTask, load_predictions, load_tasks
from loongsage.tasks.swe.source import BUNDLED_TASKS_PATH, swe_tasks

__all__ = ["BUNDLED_TASKS_PATH", "Prediction", "SweFormatError", "SweTask", "load_predictions", "load_tasks", "swe_tasks"]
