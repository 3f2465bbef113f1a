"""Grading patches against bundled SWE tasks in real sandboxes with real pytest runs."""

from __future__ import annotations

import pytest

from loongsage.tasks.swe.grading import PatchRejected, check, grade, run_with_patch
from loongsage.tasks.swe.reward import score_patch
from loongsage.tasks.swe.suite import build_suite
from loongsage.tasks.swe.suite.spec import unified_diff
from tests.integration.agentflow.sandbox.sandbox_support import NO_PYTHON, no_python_backends

TASKS = {task.instance_id: task for task in build_suite()}
MEAN = TASKS["numutil__mean-divisor"]  # F2P: test_mean, test_mean_of_one_value
CLAMP = TASKS["numutil__clamp-upper-bound"]


def edit(task, path, old, new, *more):
    """A patch to the task's file that replaces `old` by `new` (and each further
    old/new pair); each `old` must occur once."""
    content = changed = task.files[path]
    replacements = [(old, new), *zip(more[::2], more[1::2])]
    for old_text, new_text in replacements:
        assert changed.count(old_text) == 1, (path, old_text)
        changed = changed.replace(old_text, new_text)
    return unified_diff(path, content, changed)


def test_gold_patch_resolves_with_reward_one():
    value, metadata = score_patch(MEAN, MEAN.gold_patch)
    assert value == 1.0
    assert metadata["resolved"] is True and metadata["reason"] == "all 5 tests pass"
    assert metadata["tests"] == dict.fromkeys(MEAN.fail_to_pass + MEAN.pass_to_pass, True)


def test_patch_without_final_newline_still_applies():
    assert grade(CLAMP, CLAMP.gold_patch.rstrip("\n")).resolved


def test_half_fix_is_unresolved_and_says_which_test_fails():
    # Fixes the one-value case only: mean([7]) is right, mean([2, 4, 9]) still is not.
    half = edit(MEAN, "numutil.py", "sum(values) / (len(values) - 1)", "sum(values) / max(len(values) - 1, 1)")
    result = grade(MEAN, half)
    assert not result.resolved and not result.grading_error
    assert result.tests["tests/test_numutil.py::test_mean_of_one_value"] is True
    assert result.tests["tests/test_numutil.py::test_mean"] is False
    assert result.reason == "FAIL_TO_PASS not passing: tests/test_numutil.py::test_mean (failed)"


def test_fix_that_breaks_a_passing_test_is_unresolved():
    fix_and_break = edit(
        MEAN,
        "numutil.py",
        "sum(values) / (len(values) - 1)",
        "sum(values) / len(values)",
        "middle = len(ordered) // 2",
        "middle = len(ordered) // 3",
    )
    result = grade(MEAN, fix_and_break)
    assert not result.resolved
    assert all(result.tests[node_id] for node_id in MEAN.fail_to_pass)
    assert "PASS_TO_PASS not passing: tests/test_numutil.py::test_median_even_length (failed)" in result.reason


def test_patch_that_does_not_apply_scores_zero_with_gits_reason():
    result = grade(MEAN, TASKS["numutil__median-even-length"].gold_patch)
    assert not result.resolved and result.tests == {}
    assert result.reason.startswith("patch does not apply: error: patch failed: numutil.py:")


def test_source_that_no_longer_imports_fails_every_test():
    broken = edit(MEAN, "numutil.py", "def mean(values):", "def mean(values)")
    result = grade(MEAN, broken)
    assert not result.resolved
    assert set(result.tests.values()) == {False}
    assert "tests/test_numutil.py::test_mean (error)" in result.reason


def test_hanging_tests_are_cut_off_by_the_timeout():
    hang = edit(CLAMP, "numutil.py", "    return max(low, min(value, low))", "    while True:\n        pass")
    result = grade(CLAMP, hang, timeout_s=3)
    assert not result.resolved
    assert result.reason.startswith("pytest timed out after 3 s")


def test_new_conftest_is_refused_before_anything_runs():
    conftest = (
        "diff --git a/conftest.py b/conftest.py\nnew file mode 100644\n--- /dev/null\n+++ b/conftest.py\n@@ -0,0 +1 @@\n+x = 1\n"
    )
    assert grade(MEAN, MEAN.gold_patch + conftest).reason == "patch touches tests or test configuration: conftest.py"


def test_applied_tree_is_checked_for_test_edits_too():
    # The second line of defence, below the patch-text check that grade() does first.
    tamper = edit(MEAN, "tests/test_numutil.py", "assert mean([2, 4, 9]) == 5", "assert True")
    with pytest.raises(PatchRejected, match="patch touches tests or test configuration: tests/test_numutil.py"):
        run_with_patch(MEAN, tamper, "auto", 30)


@pytest.mark.parametrize("backend", no_python_backends())
def test_a_sandbox_that_cannot_run_python_is_a_grading_error_not_a_wrong_patch(backend):
    result = grade(MEAN, MEAN.gold_patch, backend=backend)
    assert not result.resolved and result.grading_error and result.tests == {}
    assert result.reason.startswith("grading error: the local sandbox cannot run pytest (")
    assert "python: command not found" in result.reason
    value, metadata = score_patch(MEAN, MEAN.gold_patch, backend=backend)
    assert value == 0.0 and metadata["error"] is True


def test_a_patch_that_kills_pytest_is_a_wrong_patch_not_a_grading_error():
    # pytest dies while collecting, without a report: the harness works, the patch broke it.
    killer = edit(MEAN, "numutil.py", "def mean(values):", "import os\nos._exit(0)\n\n\ndef mean(values):")
    result = grade(MEAN, killer)
    assert not result.resolved and not result.grading_error
    assert result.reason.startswith("pytest gave no usable report (exit status 0; no file")
    assert set(result.tests.values()) == {False}


def test_a_planted_pytest_module_does_not_pass_for_a_broken_harness():
    planted = (
        "diff --git a/pytest.py b/pytest.py\nnew file mode 100644\n--- /dev/null\n+++ b/pytest.py\n"
        "@@ -0,0 +1 @@\n+raise SystemExit(3)\n"
    )
    result = grade(MEAN, MEAN.gold_patch + planted)
    assert not result.resolved and not result.grading_error
    assert result.reason.startswith("pytest gave no usable report (exit status 3;")


def test_check_names_the_grading_error():
    problems = check(MEAN, backend=NO_PYTHON)
    assert problems and all(p.startswith("grading error: the local sandbox cannot run pytest") for p in problems)
