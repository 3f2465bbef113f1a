from __future__ import annotations

from loongsage.tasks.swe.grading import GradeResult
from loongsage.tasks.swe.report import (
    UNKNOWN_INSTANCE,
    build_report,
    check_line,
    check_summary,
    grade_line,
    grade_summary,
)

RESULTS = [
    GradeResult("a", True, "all 2 tests pass", {"t::x": True, "t::y": True}),
    GradeResult("b", False, "empty patch"),
    GradeResult("c", False, "sandbox error: bwrap failed", grading_error=True),
    GradeResult("d", False, "no prediction"),
]


def test_report_lists_every_task_once_and_errors_apart():
    report = build_report(RESULTS, unknown_predictions=["zzz"])
    assert report["resolved"] == ["a"]
    assert report["unresolved"] == ["b", "c", "d"]
    assert report["errors"] == {"c": "sandbox error: bwrap failed", "zzz": UNKNOWN_INSTANCE}
    assert report["instances"]["a"] == {"resolved": True, "reason": "all 2 tests pass", "tests": {"t::x": True, "t::y": True}}
    assert report["instances"]["d"]["reason"] == "no prediction"
    assert "zzz" not in report["instances"]
    assert report["resolve_rate"] == 0.25


def test_report_of_nothing():
    assert build_report([])["resolve_rate"] == 0.0


def test_printed_lines():
    assert grade_line(RESULTS[0]) == "a: resolved (all 2 tests pass)"
    assert grade_line(RESULTS[1]) == "b: unresolved (empty patch)"
    assert grade_summary(build_report(RESULTS)) == "resolved 1/4 (resolve rate 25.0%)"
    assert check_line("a", []) == "a: ok"
    assert check_line("b", ["gold patch is empty", "test not found: t::x"]) == (
        "b: BAD: gold patch is empty; test not found: t::x"
    )
    assert check_summary({"a": [], "b": ["x"]}) == "2 tasks: 1 ok, 1 with problems"
