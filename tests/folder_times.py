"""A pytest plugin (tests/conftest.py loads it): at the end of a run, the time each
test folder took (setup, call and teardown of its tests), so CI's budget shows where it goes."""

from __future__ import annotations

from collections import defaultdict

_seconds: defaultdict[str, float] = defaultdict(float)


def pytest_runtest_logreport(report) -> None:
    path = report.nodeid.split("::")[0]
    _seconds[path.rpartition("/")[0] or "."] += report.duration


def pytest_terminal_summary(terminalreporter) -> None:
    if not _seconds:
        return
    terminalreporter.write_sep("=", "time per test folder")
    for folder, seconds in sorted(_seconds.items(), key=lambda item: -item[1]):
        terminalreporter.write_line(f"{seconds:8.1f} s  {folder}")
    terminalreporter.write_line(f"{sum(_seconds.values()):8.1f} s  all folders")
