"""GSM8K-style JSONL: one {"question": ..., "answer": "... #### 72"} object per line."""

from __future__ import annotations

import json
from pathlib import Path

from loongsage.tasks.math.prompt import math_prompt

SAMPLE_PATH = Path(__file__).parent / "data" / "gsm8k_sample.jsonl"


class DatasetFormatError(ValueError):
    """A data file line that does not have the expected shape; the message starts with
    `path:line:`."""


def load_gsm8k_jsonl(path: str | Path | None = None) -> list[dict]:
    """Items `{"id", "prompt", "label"}` from a GSM8K-style file (the bundled 20-problem
    sample when `path` is None). Blank lines are skipped."""
    path = Path(path) if path is not None else SAMPLE_PATH
    items = []
    with path.open(encoding="utf-8") as lines:
        for line_no, line in enumerate(lines, start=1):
            if line.strip():
                items.append(_parse_line(line, path, line_no))
    return items


def _parse_line(line: str, path: Path, line_no: int) -> dict:
    def fail(reason: str) -> DatasetFormatError:
        return DatasetFormatError(f"{path}:{line_no}: {reason}")

    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise fail(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(record, dict):
        raise fail(f"expected a JSON object, got {type(record).__name__}")
    for field in ("question", "answer"):
        if not isinstance(record.get(field), str):
            raise fail(f"field {field!r} is missing or not a string")
    if "####" not in record["answer"]:
        raise fail("field 'answer' has no '#### <final answer>' marker")
    label = record["answer"].rsplit("####", 1)[1].strip().replace(",", "")
    if not label:
        raise fail("field 'answer' has nothing after '####'")
    return {
        "id": str(record.get("id", f"{path.stem}-{line_no}")),
        "prompt": math_prompt(record["question"]),
        "label": label,
    }
