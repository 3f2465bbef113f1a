"""The grade report (SWE-bench style) and the lines the commands print."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from loongsage.tasks.swe.grading import GradeResult

UNKNOWN_INSTANCE = "prediction for an instance_id that is not in the task file"


def build_report(results: Sequence[GradeResult], unknown_predictions: Sequence[str] = ()) -> dict[str, Any]:
    """`{"resolved", "unresolved", "errors", "instances", "resolve_rate"}`. Every task is
    in exactly one of resolved/unresolved; `errors` holds grading failures (also counted
    unresolved) and predictions whose instance_id names no task."""
    resolved = [result.instance_id for result in results if result.resolved]
    errors = {result.instance_id: result.reason for result in results if result.grading_error}
    errors.update(dict.fromkeys(unknown_predictions, UNKNOWN_INSTANCE))
    return {
        "resolved": resolved,
        "unresolved": [result.instance_id for result in results if not result.resolved],
        "errors": errors,
        "instances": {
            result.instance_id: {"resolved": result.resolved, "reason": result.reason, "tests": result.tests}
            for result in results
        },
        "resolve_rate": len(resolved) / len(results) if results else 0.0,
    }


def grade_line(result: GradeResult) -> str:
    return f"{result.instance_id}: {'resolved' if result.resolved else 'unresolved'} ({result.reason})"


def grade_summary(report: dict[str, Any]) -> str:
    total = len(report["instances"])
    return f"resolved {len(report['resolved'])}/{total} (resolve rate {report['resolve_rate']:.1%})"


def check_line(instance_id: str, problems: Sequence[str]) -> str:
    return f"{instance_id}: ok" if not problems else f"{instance_id}: BAD: {'; '.join(problems)}"


def check_summary(problems_by_task: dict[str, Sequence[str]]) -> str:
    bad = sum(1 for problems in problems_by_task.values() if problems)
    return f"{len(problems_by_task)} tasks: {len(problems_by_task) - bad} ok, {bad} with problems"
