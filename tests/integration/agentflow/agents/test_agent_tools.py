"""The white-box agent's tools against a real sandbox: results, and every model mistake as text."""

from __future__ import annotations

import json

import pytest

from loongsage.agentflow.agents.tools import TOOL_NAMES, run_tool, truncate_middle
from loongsage.agentflow.sandbox import create_sandbox


@pytest.fixture
def sandbox():
    with create_sandbox({"pkg/mod.py": "def add(a, b):\n    return a - b\n"}) as sb:
        yield sb


def call(sandbox, name, **arguments):
    return run_tool(name, json.dumps(arguments), sandbox, command_timeout_s=10)


def test_edit_then_run_shows_the_fix_and_the_diff(sandbox):
    assert "return a - b" in call(sandbox, "read_file", path="pkg/mod.py").text
    assert call(sandbox, "str_replace", path="pkg/mod.py", old_str="a - b", new_str="a + b").text.startswith("replaced")
    out = call(sandbox, "bash", command="python3 -c 'from pkg.mod import add; print(add(2, 3))'").text
    assert out.splitlines() == ["exit code 0", "5"]
    assert "+    return a + b" in sandbox.diff()


def test_write_file_creates_and_bash_reports_failures(sandbox):
    call(sandbox, "write_file", path="notes/new.txt", content="hello")
    assert call(sandbox, "read_file", path="notes/new.txt").text == "hello"
    out = call(sandbox, "bash", command="echo oops >&2; exit 3").text
    assert out.splitlines() == ["exit code 3", "stderr:", "oops"]


@pytest.mark.parametrize(
    "name, raw, expected",
    [
        ("rm_rf", "{}", "unknown tool 'rm_rf'"),
        ("bash", "{not json", "not valid JSON"),
        ("bash", "[1, 2]", "must be a JSON object"),
        ("bash", "{}", "needs string argument(s) command"),
        ("str_replace", json.dumps({"path": "pkg/mod.py", "old_str": "zzz", "new_str": "y"}), "old_str not found"),
        ("str_replace", json.dumps({"path": "pkg/mod.py", "old_str": "a", "new_str": "y"}), "found 3 times"),
        ("read_file", json.dumps({"path": "missing.py"}), "missing.py"),
        ("read_file", json.dumps({"path": "../../etc/passwd"}), "../../etc/passwd"),
    ],
)
def test_model_mistakes_come_back_as_text(sandbox, name, raw, expected):
    outcome = run_tool(name, raw, sandbox, command_timeout_s=10)
    assert outcome.text.startswith("error:") and expected in outcome.text
    assert not outcome.submitted


def test_submit_ends_with_its_answer_and_runaway_commands_time_out(sandbox):
    done = call(sandbox, "submit", answer="42")
    assert done.submitted and done.answer == "42"
    assert run_tool("bash", json.dumps({"command": "sleep 30"}), sandbox, command_timeout_s=1).text == "timed out"
    assert set(TOOL_NAMES) == {"bash", "read_file", "write_file", "str_replace", "submit"}


def test_long_output_keeps_head_and_tail():
    text = "HEAD" + "x" * 10_000 + "TAIL"
    short = truncate_middle(text, 100)
    assert short.startswith("HEAD") and short.endswith("TAIL") and "9908 characters omitted" in short
    assert truncate_middle("short", 100) == "short"
