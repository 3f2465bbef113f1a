from __future__ import annotations

import pytest

from loongsage.tasks.swe import BUNDLED_TASKS_PATH, load_tasks
from loongsage.tasks.swe.patches import is_protected_path, touched_paths
from loongsage.tasks.swe.suite import build_suite, suite_jsonl
from loongsage.tasks.swe.suite.spec import Bug, SuiteTask, unified_diff

SUITE = build_suite()


def test_committed_jsonl_is_what_the_generator_writes():
    # Regenerate with `python -m loongsage.tasks.swe.suite` after editing a repos_*.py module.
    assert BUNDLED_TASKS_PATH.read_text(encoding="utf-8") == suite_jsonl(SUITE)
    assert load_tasks(BUNDLED_TASKS_PATH) == SUITE


def test_suite_size_and_easy_share():
    assert len(SUITE) >= 40
    assert sum(task.difficulty == "easy" for task in SUITE) >= 15
    assert {task.difficulty for task in SUITE} == {"easy", "medium", "hard"}


@pytest.mark.parametrize("task", SUITE, ids=lambda task: task.instance_id)
def test_task_shape(task):
    sources = [path for path in task.files if not is_protected_path(path) and not path.endswith("__init__.py")]
    assert 1 <= len(sources) <= 3
    assert any(path.startswith("tests/") for path in task.files)
    assert 30 <= sum(content.count("\n") for content in task.files.values()) <= 150
    assert 1 <= len(task.fail_to_pass) <= 3
    changed = touched_paths(task.gold_patch)
    assert changed and set(changed) <= set(sources), "the gold patch changes source files only"
    # Written as an issue: an example call in a code block and the result the user expected.
    assert "expected" in task.problem_statement.lower() and "```" in task.problem_statement


@pytest.mark.parametrize("task", [t for t in SUITE if t.difficulty == "easy"], ids=lambda task: task.instance_id)
def test_easy_tasks_are_one_line_fixes_in_a_named_file(task):
    [path] = touched_paths(task.gold_patch)
    changed_lines = [line for line in task.gold_patch.splitlines() if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    assert len(changed_lines) == 2, changed_lines  # one line out, one line in
    assert path in task.problem_statement.splitlines()[0], "the issue's title names the file"
    assert len(task.files[path].splitlines()) <= 40


def test_bug_must_match_exactly_once():
    files = {"m.py": "a = 1\na = 1\n", "tests/test_m.py": "x\n"}
    task = SuiteTask("t", "easy", "p", files, (Bug("m.py", "a = 1", "a = 2"),), ("tests/test_m.py::t",), ())
    with pytest.raises(ValueError, match="occurs 2 times in 'm.py'"):
        task.to_task()


def test_gold_patch_is_a_git_style_diff_back_to_the_fixed_file():
    files = {"m.py": "def f():\n    return 1\n", "tests/test_m.py": "x\n"}
    task = SuiteTask("t", "easy", "p", files, (Bug("m.py", "return 1", "return 2"),), ("tests/test_m.py::t",), ())
    built = task.to_task()
    assert built.files["m.py"] == "def f():\n    return 2\n"
    assert built.gold_patch == (
        "diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -1,2 +1,2 @@\n def f():\n-    return 2\n+    return 1\n"
    )


def test_diff_needs_final_newlines():
    with pytest.raises(ValueError, match="m.py: suite files must end with a newline"):
        unified_diff("m.py", "a", "b\n")
