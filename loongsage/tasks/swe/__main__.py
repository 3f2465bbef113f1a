"""`python -m loongsage.tasks.swe check TASKS.jsonl` and `... grade TASKS.jsonl PREDS.jsonl`.

Both first check the sandbox backend (a tool call, one bundled gold patch graded) and exit 2
with the reason and the fix when it cannot grade, rather than failing every task alike."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from loongsage.logs import setup_logging
from loongsage.tasks.swe.grading import DEFAULT_TIMEOUT_S, GradeResult, check, grade
from loongsage.tasks.swe.instance import SweFormatError, SweTask, load_predictions, load_tasks
from loongsage.tasks.swe.preflight import PreflightError, sandbox_preflight
from loongsage.tasks.swe.report import (
    UNKNOWN_INSTANCE,
    build_report,
    check_line,
    check_summary,
    grade_line,
    grade_summary,
)

# Named, not __name__: run with `python -m` this module is __main__, outside the loongsage logger.
log = logging.getLogger("loongsage.tasks.swe")

T = TypeVar("T")
R = TypeVar("R")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return args.command(args)
    except (SweFormatError, OSError, PreflightError) as exc:  # a bad task, prediction or report path; no sandbox
        print(f"error: {exc}", file=sys.stderr)  # the command's answer to bad input, like argparse's
        return 2


def _preflight(args: argparse.Namespace) -> None:
    log.info("%s", sandbox_preflight(args.backend, choose="--backend NAME"))


def _check(args: argparse.Namespace) -> int:
    """Exit 0 iff every task is sound."""
    tasks = load_tasks(args.tasks)
    _preflight(args)
    problems_by_task: dict[str, list[str]] = {}
    results = _in_order(lambda task: check(task, args.backend, args.timeout), tasks, args.workers)
    for task, problems in zip(tasks, results):
        print(check_line(task.instance_id, problems), flush=True)
        problems_by_task[task.instance_id] = problems
    print(check_summary(problems_by_task))
    return 1 if any(problems_by_task.values()) else 0


def _grade(args: argparse.Namespace) -> int:
    tasks = load_tasks(args.tasks)
    predictions = {prediction.instance_id: prediction for prediction in load_predictions(args.predictions)}
    _preflight(args)
    task_ids = {task.instance_id for task in tasks}
    unknown = [instance_id for instance_id in predictions if instance_id not in task_ids]

    def grade_one(task: SweTask) -> GradeResult:
        prediction = predictions.get(task.instance_id)
        if prediction is None:
            return GradeResult(task.instance_id, False, "no prediction")
        return grade(task, prediction.model_patch, args.backend, args.timeout)

    results = []
    for result in _in_order(grade_one, tasks, args.workers):
        print(grade_line(result), flush=True)
        results.append(result)
    for instance_id in unknown:
        print(f"{instance_id}: error ({UNKNOWN_INSTANCE})")
    report = build_report(results, unknown)
    report_path = Path(args.report) if args.report else Path(args.predictions).with_suffix(".report.json")
    _write_atomically(report_path, report)
    print(grade_summary(report))
    print(f"report: {report_path}")
    return 0


def _in_order(work: Callable[[T], R], items: Iterable[T], workers: int) -> Iterator[R]:
    """`work` over items on `workers` threads (each item waits on its own sandbox
    subprocess), results in input order as soon as each is ready."""
    if workers <= 1:
        yield from map(work, items)
        return
    with ThreadPoolExecutor(max_workers=workers) as pool:
        yield from pool.map(work, items)


def _write_atomically(path: Path, report: dict[str, Any]) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    os.replace(temporary, path)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m loongsage.tasks.swe", description=__doc__)
    commands = parser.add_subparsers(required=True, metavar="{check,grade}")

    check_parser = commands.add_parser(
        "check", help="the gold patch fixes every task, and only the FAIL_TO_PASS tests fail before it"
    )
    check_parser.add_argument("tasks", metavar="TASKS.jsonl")
    check_parser.set_defaults(command=_check)

    grade_parser = commands.add_parser("grade", help="grade SWE-bench style predictions (instance_id, model_patch)")
    grade_parser.add_argument("tasks", metavar="TASKS.jsonl")
    grade_parser.add_argument("predictions", metavar="PREDS.jsonl")
    grade_parser.add_argument("--report", help="where to write the JSON report (default: PREDS.report.json)")
    grade_parser.set_defaults(command=_grade)

    for sub in (check_parser, grade_parser):
        sub.add_argument("--backend", default="auto", help="sandbox backend (default: auto)")
        sub.add_argument("--workers", type=_positive_int, default=2, help="tasks graded at once (default: 2)")
        sub.add_argument(
            "--timeout",
            type=float,
            default=DEFAULT_TIMEOUT_S,
            help=f"seconds allowed for one pytest run (default: {DEFAULT_TIMEOUT_S:g})",
        )
    return parser


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


if __name__ == "__main__":
    setup_logging(results_on_stdout=True)  # stdout is the per-task lines and the summary
    sys.exit(main())
