"""Where the bundled suite lives (written by `python -m loongsage.tasks.swe.suite`)."""

from pathlib import Path

BUNDLED_TASKS_PATH = Path(__file__).parent / "data" / "swe_tasks.jsonl"
