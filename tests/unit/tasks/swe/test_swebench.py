from __future__ import annotations

import json

import pytest

from loongsage.tasks.swe.instance import SweFormatError
from loongsage.tasks.swe.swebench import load_swebench, task_from_swebench

# Hand-written, in the field layout of the SWE-bench Hugging Face export: test ids as
# JSON-encoded strings, extra fields the converter ignores.
SWEBENCH_INSTANCE = {
    "repo": "pallets/flask",
    "instance_id": "pallets__flask-4045",
    "base_commit": "d8c37f43724cd9fb0870f77877b7c4c7e38a19e0",
    "patch": "diff --git a/src/flask/blueprints.py b/src/flask/blueprints.py\n--- a/src/flask/blueprints.py\n"
    '+++ b/src/flask/blueprints.py\n@@ -188,6 +188,8 @@\n+        if "." in name:\n'
    "+            raise ValueError(\"'name' may not contain a dot '.' character.\")\n",
    "test_patch": "diff --git a/tests/test_blueprints.py b/tests/test_blueprints.py\n--- a/tests/test_blueprints.py\n"
    "+++ b/tests/test_blueprints.py\n@@ -1,3 +1,8 @@\n+def test_dotted_name_not_allowed(app, client):\n",
    "problem_statement": "Raise error when blueprint name contains a dot\n",
    "hints_text": "",
    "created_at": "2021-05-13T21:32:41Z",
    "version": "2.0",
    "FAIL_TO_PASS": '["tests/test_blueprints.py::test_dotted_name_not_allowed"]',
    "PASS_TO_PASS": '["tests/test_blueprints.py::test_blueprint_specific_error_handling", '
    '"tests/test_blueprints.py::test_route_decorator_custom_endpoint[True]"]',
    "environment_setup_commit": "4346498c85848c53843b810537b83a8f6124c9d3",
}

# SWE-Gym style: lists instead of JSON strings, and the image that holds the repository.
SWEGYM_INSTANCE = {
    "instance_id": "getmoto__moto-5752",
    "repo": "getmoto/moto",
    "base_commit": "b2300f1eae1323e3e8bc45f97e530ce129dff12e",
    "patch": "diff --git a/moto/ssm/models.py b/moto/ssm/models.py\n",
    "test_patch": "diff --git a/tests/test_ssm/test_ssm_boto3.py b/tests/test_ssm/test_ssm_boto3.py\n",
    "problem_statement": "describe_parameters depends on filter order, but shouldn't\n",
    "hints_text": "Thanks for raising this!",
    "FAIL_TO_PASS": ["tests/test_ssm/test_ssm_boto3.py::test_describe_parameters__multiple_tags"],
    "PASS_TO_PASS": [],
    "image_name": "xingyaoww/sweb.eval.x86_64.getmoto_s_moto-5752",
    "version": "4.0",
}


def test_swebench_instance_with_json_encoded_test_ids():
    task = task_from_swebench(SWEBENCH_INSTANCE)
    assert task.instance_id == "pallets__flask-4045"
    assert task.fail_to_pass == ["tests/test_blueprints.py::test_dotted_name_not_allowed"]
    assert task.pass_to_pass[1] == "tests/test_blueprints.py::test_route_decorator_custom_endpoint[True]"
    assert task.gold_patch == SWEBENCH_INSTANCE["patch"]
    assert task.test_patch == SWEBENCH_INSTANCE["test_patch"]
    assert (task.repo, task.base_commit) == ("pallets/flask", "d8c37f43724cd9fb0870f77877b7c4c7e38a19e0")
    assert task.files == {} and task.image is None and task.hints is None  # "" hints become None


def test_swegym_instance_with_lists_and_image():
    task = task_from_swebench(SWEGYM_INSTANCE)
    assert task.image == "xingyaoww/sweb.eval.x86_64.getmoto_s_moto-5752"
    assert task.pass_to_pass == []
    assert task.hints == "Thanks for raising this!"


def test_docker_image_field_is_read_too():
    task = task_from_swebench(SWEGYM_INSTANCE | {"image_name": None, "docker_image": "registry/img:1"})
    assert task.image == "registry/img:1"


@pytest.mark.parametrize(
    "change, reason",
    [
        ({"FAIL_TO_PASS": "tests/x.py::t"}, "'FAIL_TO_PASS' is a string but not a JSON-encoded list"),
        ({"FAIL_TO_PASS": "[1]"}, "'FAIL_TO_PASS' must be a list of pytest node ids"),
        ({"FAIL_TO_PASS": "[]"}, "'FAIL_TO_PASS' lists no test"),
        ({"patch": None}, "field 'gold_patch' must be a string"),
    ],
)
def test_bad_instance_names_the_field(change, reason):
    with pytest.raises(ValueError, match=reason):
        task_from_swebench(SWEBENCH_INSTANCE | change)


def test_missing_swebench_fields_are_listed():
    record = {k: v for k, v in SWEBENCH_INSTANCE.items() if k not in ("test_patch", "base_commit")}
    with pytest.raises(ValueError, match="SWE-bench field\\(s\\) missing: 'base_commit', 'test_patch'"):
        task_from_swebench(record)


def test_load_swebench_jsonl(tmp_path):
    path = tmp_path / "swebench.jsonl"
    path.write_text(json.dumps(SWEBENCH_INSTANCE) + "\n" + json.dumps(SWEGYM_INSTANCE) + "\n")
    assert [task.instance_id for task in load_swebench(path)] == ["pallets__flask-4045", "getmoto__moto-5752"]
    path.write_text(json.dumps(SWEBENCH_INSTANCE) + "\n" + json.dumps(SWEBENCH_INSTANCE) + "\n")
    with pytest.raises(SweFormatError, match="swebench.jsonl:2: duplicate instance_id"):
        load_swebench(path)
