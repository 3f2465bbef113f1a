"""Synthesized SWE tasks and gold patches written as tool calls."""

from __future__ import annotations

import sys
import types

import pytest

from loongsage.tasks.swe.demonstration import gold_tool_calls
from loongsage.tasks.swe.source import swe_synth, task_prompt
from loongsage.tasks.swe.suite import SUITE_TASKS
from loongsage.tasks.swe.synth import synth_task


def _apply(files: dict[str, str], calls: list[dict]) -> dict[str, str]:
    out = dict(files)
    for call in calls:
        if call["name"] == "str_replace":
            a = call["arguments"]
            assert out[a["path"]].count(a["old_str"]) == 1, a
            out[a["path"]] = out[a["path"]].replace(a["old_str"], a["new_str"], 1)
    return out


def _failing_tests(files: dict[str, str]) -> set[str]:
    """Runs the module's tests in-process (fast; the CLI test runs real pytest)."""
    (module_path,) = [p for p in files if not p.startswith("tests/")]
    (test_path,) = [p for p in files if p.startswith("tests/")]
    name = module_path[:-3]
    module = types.ModuleType(name)
    exec(files[module_path], module.__dict__)
    sys.modules[name] = module
    try:
        namespace: dict = {}
        exec(files[test_path], namespace)
        failing = set()
        for test_name, test in namespace.items():
            if test_name.startswith("test_"):
                try:
                    test()
                except Exception:
                    failing.add(f"{test_path}::{test_name}")
        return failing
    finally:
        del sys.modules[name]


def test_tasks_are_a_pure_function_of_seed_and_index():
    assert synth_task(3, 5) == synth_task(3, 5)
    assert len({synth_task(3, i).files[next(iter(synth_task(3, i).files))] for i in range(50)}) == 50
    assert synth_task(3, 5) != synth_task(4, 5)


@pytest.mark.parametrize("seed", [0, 1])
def test_buggy_tree_fails_exactly_fail_to_pass_and_gold_calls_fix_it(seed):
    for index in range(150):
        task = synth_task(seed, index)
        assert task.fail_to_pass and task.pass_to_pass
        assert _failing_tests(task.files) == set(task.fail_to_pass), task.instance_id
        calls = gold_tool_calls(task)
        assert [c["name"] for c in calls] == ["str_replace", "submit"]
        assert _failing_tests(_apply(task.files, calls)) == set(), task.instance_id


def test_gold_calls_rebuild_the_fixed_tree_of_every_bundled_task():
    for suite_task in SUITE_TASKS:
        task = suite_task.to_task()
        calls = gold_tool_calls(task)
        assert calls is not None and calls[-1]["name"] == "submit", task.instance_id
        assert _apply(task.files, calls) == suite_task.files, task.instance_id


def test_gold_calls_anchor_a_repeated_line_with_context():
    from loongsage.tasks.swe.instance import SweTask
    from loongsage.tasks.swe.suite.spec import unified_diff

    buggy = "def f():\n    return 1\n\n\ndef g():\n    x = 2\n    return 1\n"
    fixed = buggy.replace("    x = 2\n    return 1", "    x = 2\n    return x")
    task = SweTask("t", "g", {"m.py": buggy}, [], [], unified_diff("m.py", buggy, fixed))
    (edit, _submit) = gold_tool_calls(task)
    assert edit["arguments"]["old_str"] == "x = 2\n    return 1"
    assert _apply(task.files, [edit])["m.py"] == fixed
    assert gold_tool_calls(SweTask("t", "g", {}, [], [], task.gold_patch)) is None  # image task: no files


def test_prompt_shows_source_files_but_not_tests():
    (item,) = swe_synth(count=1, seed=2)
    task = item["task"]
    (module_path,) = [p for p in task.files if not p.startswith("tests/")]
    assert item["prompt"].startswith(task.problem_statement.rstrip("\n"))
    assert f"{module_path}:\n```python\n{task.files[module_path]}```" in item["prompt"]
    assert "def test_" not in item["prompt"]
    assert task_prompt(task, show_files=False) == task.problem_statement
