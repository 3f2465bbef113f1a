"""`python -m loongsage.tasks.swe check|grade` run as real subprocesses on the bundled suite."""

from __future__ import annotations

import json
import subprocess
import sys

from loongsage.tasks.swe import BUNDLED_TASKS_PATH
from loongsage.tasks.swe.suite import build_suite, suite_jsonl
from loongsage.tasks.swe.suite.spec import unified_diff

SUITE = build_suite()
# Checking all tasks takes two pytest runs each (minutes on two busy cores), so the test
# checks every 7th task, one from each kind of repository; `python -m loongsage.tasks.swe
# check` on the whole file is the full check.
SUBSET = SUITE[::7]


def run_cli(*args, timeout=600):
    return subprocess.run(
        [sys.executable, "-m", "loongsage.tasks.swe", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return path


def tampering_patch(task):
    """Makes the first FAIL_TO_PASS test pass by neutering its assertions."""
    test_file = task.fail_to_pass[0].split("::")[0]
    content = task.files[test_file]
    return unified_diff(test_file, content, content.replace("    assert ", "    assert True or "))


def test_check_passes_on_bundled_tasks(tmp_path):
    subset = tmp_path / "subset.jsonl"
    subset.write_text(suite_jsonl(SUBSET))
    done = run_cli("check", subset, "--workers", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[:-1] == [f"{task.instance_id}: ok" for task in SUBSET]
    assert lines[-1] == f"{len(SUBSET)} tasks: {len(SUBSET)} ok, 0 with problems"


def test_check_reports_each_broken_task_with_its_reason(tmp_path):
    task = next(t for t in SUITE if t.instance_id == "numutil__clamp-upper-bound")
    passing_f2p = task.to_record() | {
        "instance_id": "f2p-passes-unfixed",
        "FAIL_TO_PASS": task.fail_to_pass + ["tests/test_numutil.py::test_mean"],
        "PASS_TO_PASS": [t for t in task.pass_to_pass if t != "tests/test_numutil.py::test_mean"],
    }
    missing_test = task.to_record() | {
        "instance_id": "missing-test",
        "PASS_TO_PASS": task.pass_to_pass + ["tests/test_numutil.py::test_nope"],
    }
    gold_tampers = task.to_record() | {
        "instance_id": "gold-tampers",
        "gold_patch": task.gold_patch + tampering_patch(task),
    }
    path = write_jsonl(tmp_path / "bad.jsonl", [task.to_record(), passing_f2p, missing_test, gold_tampers])
    done = run_cli("check", path, "--workers", "2")
    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        "numutil__clamp-upper-bound: ok",
        "f2p-passes-unfixed: BAD: FAIL_TO_PASS test passes without the fix: tests/test_numutil.py::test_mean",
        "missing-test: BAD: PASS_TO_PASS test does not pass without the fix: tests/test_numutil.py::test_nope "
        "(not found); test not found: tests/test_numutil.py::test_nope",
        "gold-tampers: BAD: gold patch touches tests or test configuration: tests/test_numutil.py",
        "4 tasks: 1 ok, 3 with problems",
    ]


def test_grade_gold_empty_tampering_and_missing_predictions(tmp_path):
    gold, empty, tampered = SUBSET, SUITE[1::7], SUITE[2::7]  # the rest get no prediction
    predictions = (
        [{"instance_id": t.instance_id, "model_patch": t.gold_patch, "model_name_or_path": "gold"} for t in gold]
        + [{"instance_id": t.instance_id, "model_patch": None if i % 2 else ""} for i, t in enumerate(empty)]
        + [{"instance_id": t.instance_id, "model_patch": tampering_patch(t)} for t in tampered]
        + [{"instance_id": "not-a-task", "model_patch": "x"}]
    )
    preds = write_jsonl(tmp_path / "preds.jsonl", predictions)
    done = run_cli("grade", BUNDLED_TASKS_PATH, preds, "--workers", "2")
    assert done.returncode == 0, done.stderr

    report = json.loads((tmp_path / "preds.report.json").read_text())
    assert report["resolved"] == [t.instance_id for t in gold]
    assert report["resolve_rate"] == len(gold) / len(SUITE)
    assert sorted(report["resolved"] + report["unresolved"]) == sorted(t.instance_id for t in SUITE)
    assert report["errors"] == {"not-a-task": "prediction for an instance_id that is not in the task file"}
    instances = report["instances"]
    assert all(instances[t.instance_id]["tests"] == dict.fromkeys(t.fail_to_pass + t.pass_to_pass, True) for t in gold)
    assert {instances[t.instance_id]["reason"] for t in empty} == {"empty patch"}
    for task in tampered:
        test_file = task.fail_to_pass[0].split("::")[0]
        assert instances[task.instance_id] == {
            "resolved": False,
            "reason": f"patch touches tests or test configuration: {test_file}",
            "tests": {},
        }
    graded = {t.instance_id for t in gold + empty + tampered}
    assert {instances[t.instance_id]["reason"] for t in SUITE if t.instance_id not in graded} == {"no prediction"}

    out = done.stdout.splitlines()
    assert f"{gold[0].instance_id}: resolved (all {len(gold[0].test_ids)} tests pass)" in out
    assert f"{empty[0].instance_id}: unresolved (empty patch)" in out
    assert "not-a-task: error (prediction for an instance_id that is not in the task file)" in out
    assert out[-2] == f"resolved {len(gold)}/{len(SUITE)} (resolve rate {len(gold) / len(SUITE):.1%})"
    assert out[-1] == f"report: {tmp_path / 'preds.report.json'}"


def test_bad_input_file_exits_2_naming_the_line(tmp_path):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(suite_jsonl(SUITE[:1]) + '{"instance_id": "x"}\n')
    done = run_cli("grade", tasks, tmp_path / "preds.jsonl", "--report", tmp_path / "r.json")
    assert done.returncode == 2
    assert done.stderr == f"error: {tasks}:2: field 'problem_statement' is missing\n"
    assert not (tmp_path / "r.json").exists()


def test_check_passes_on_synthesized_tasks(tmp_path):
    """The generator's F2P/P2P ids hold under real pytest in a sandbox, not only in its own eval."""
    from loongsage.tasks.swe.synth import synth_task

    tasks = [synth_task(11, index) for index in range(6)]
    path = tmp_path / "synth.jsonl"
    path.write_text(suite_jsonl(tasks))
    done = run_cli("check", path, "--workers", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == "6 tasks: 6 ok, 0 with problems"
