from __future__ import annotations

import json

import pytest

from loongsage.tasks.swe.instance import SweFormatError, SweTask, load_predictions, load_tasks

GOOD_TASK = {
    "instance_id": "demo__one",
    "problem_statement": "add() subtracts",
    "files": {"calc.py": "def add(a, b):\n    return a - b\n", "tests/test_calc.py": "..."},
    "FAIL_TO_PASS": ["tests/test_calc.py::test_add"],
    "PASS_TO_PASS": ["tests/test_calc.py::test_other"],
    "gold_patch": "diff --git a/calc.py b/calc.py\n",
}


def write_lines(tmp_path, *records, name="tasks.jsonl"):
    path = tmp_path / name
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


def test_loads_tasks_with_optional_fields_and_round_trips(tmp_path):
    second = GOOD_TASK | {"instance_id": "demo__two", "difficulty": "easy", "image": None, "hints": "look at add"}
    path = write_lines(tmp_path, GOOD_TASK, "", second)
    first, loaded = load_tasks(path)
    assert first.fail_to_pass == ["tests/test_calc.py::test_add"]
    assert first.test_ids == ["tests/test_calc.py::test_add", "tests/test_calc.py::test_other"]
    assert (loaded.difficulty, loaded.hints, loaded.image) == ("easy", "look at add", None)
    # to_record is the JSONL form: reading it back gives the same task, unset fields left out.
    assert "image" not in loaded.to_record()
    assert load_tasks(write_lines(tmp_path, loaded.to_record(), name="again.jsonl")) == [loaded]


@pytest.mark.parametrize(
    "line, reason",
    [
        ('{"instance_id": "x",', "not valid JSON"),
        ('["a list"]', "expected a JSON object, got list"),
        (GOOD_TASK | {"FAIL_TO_PAS": []}, "unknown field\\(s\\) 'FAIL_TO_PAS'"),
        ({k: v for k, v in GOOD_TASK.items() if k != "gold_patch"}, "field 'gold_patch' is missing"),
        (GOOD_TASK | {"instance_id": "  "}, "field 'instance_id' is empty"),
        (GOOD_TASK | {"FAIL_TO_PASS": "tests/test_calc.py::test_add"}, "'FAIL_TO_PASS' must be a list of pytest"),
        (GOOD_TASK | {"PASS_TO_PASS": [1]}, "'PASS_TO_PASS' must be a list of pytest node ids"),
        (GOOD_TASK | {"FAIL_TO_PASS": []}, "'FAIL_TO_PASS' lists no test"),
        (GOOD_TASK | {"PASS_TO_PASS": ["a::b", "a::b"]}, "'PASS_TO_PASS' lists a test more than once"),
        (GOOD_TASK | {"PASS_TO_PASS": ["tests/test_calc.py::test_add"]}, "in both 'FAIL_TO_PASS' and 'PASS_TO_PASS'"),
        (GOOD_TASK | {"files": ["calc.py"]}, "'files' must be a mapping of path -> content, got list"),
        (GOOD_TASK | {"files": {"calc.py": 3}}, "content of 'calc.py' must be a string"),
        (GOOD_TASK | {"files": {"../escape.py": ""}}, "path '../escape.py' must be relative"),
        (GOOD_TASK | {"files": {"/etc/passwd": ""}}, "path '/etc/passwd' must be relative"),
        (GOOD_TASK | {"files": {".git/config": ""}}, "path '.git/config' must be relative"),
        (GOOD_TASK | {"files": {}}, "'files' is empty and neither 'image' nor 'repo' \\+ 'base_commit'"),
        (GOOD_TASK | {"gold_patch": None}, "field 'gold_patch' must be a string, got NoneType"),
        (GOOD_TASK | {"difficulty": 1}, "field 'difficulty' must be a string, got int"),
    ],
)
def test_bad_task_line_names_file_line_and_field(tmp_path, line, reason):
    path = write_lines(tmp_path, GOOD_TASK | {"instance_id": "ok"}, line)
    with pytest.raises(SweFormatError, match=rf"tasks\.jsonl:2: .*{reason}"):
        load_tasks(path)


def test_duplicate_instance_id_names_both_lines(tmp_path):
    path = write_lines(tmp_path, GOOD_TASK, GOOD_TASK | {"instance_id": "other"}, GOOD_TASK)
    with pytest.raises(SweFormatError, match=r"tasks\.jsonl:3: duplicate instance_id 'demo__one' \(first on line 1\)"):
        load_tasks(path)


def test_files_may_be_empty_for_cluster_tasks(tmp_path):
    record = GOOD_TASK | {"files": {}, "repo": "owner/name", "base_commit": "abc123"}
    [task] = load_tasks(write_lines(tmp_path, record))
    assert task.files == {} and task.repo == "owner/name"


def test_missing_file_is_a_format_error(tmp_path):
    with pytest.raises(SweFormatError, match="nope.jsonl: cannot read"):
        load_tasks(tmp_path / "nope.jsonl")


def test_predictions_in_swebench_format(tmp_path):
    path = write_lines(
        tmp_path,
        {"instance_id": "a", "model_patch": "diff --git ...", "model_name_or_path": "smol"},
        {"instance_id": "b", "model_patch": None},
        name="preds.jsonl",
    )
    first, second = load_predictions(path)
    assert (first.model_patch, first.model_name_or_path) == ("diff --git ...", "smol")
    assert second.model_patch == ""  # SWE-bench writes null when the model gave no patch


@pytest.mark.parametrize(
    "line, reason",
    [
        ({"instance_id": "a"}, "field 'model_patch' is missing"),
        ({"instance_id": "a", "model_patch": ["x"]}, "'model_patch' must be a string or null, got list"),
        ({"model_patch": "x"}, "field 'instance_id' is missing"),
        ({"instance_id": "a", "model_patch": "", "patch": "x"}, "unknown field\\(s\\) 'patch'"),
        ({"instance_id": "z", "model_patch": ""}, "duplicate instance_id 'z' \\(first on line 1\\)"),
    ],
)
def test_bad_prediction_line(tmp_path, line, reason):
    path = write_lines(tmp_path, {"instance_id": "z", "model_patch": ""}, line, name="preds.jsonl")
    with pytest.raises(SweFormatError, match=rf"preds\.jsonl:2: .*{reason}"):
        load_predictions(path)


def test_task_is_immutable():
    task = SweTask("a", "p", {"x.py": ""}, ["t::a"], [], "")
    with pytest.raises(AttributeError):
        task.instance_id = "b"  # type: ignore[misc]
