from __future__ import annotations

import json

import pytest

from loongsage.tasks.math.jsonl import SAMPLE_PATH, DatasetFormatError, load_gsm8k_jsonl
from loongsage.tasks.math.reward import math_reward


def test_bundled_sample_loads_with_final_answers():
    items = load_gsm8k_jsonl()
    assert len(items) == 20
    assert items[0]["label"] == "7"
    assert items[0]["id"] == "gsm8k_sample-1"
    assert items[0]["prompt"][0]["content"].startswith("Tom has 12 apples.")
    labels = {item["label"] for item in items}
    assert {"1200", "-6", "2.5"} <= labels  # thousands comma removed, negative, decimal kept


def test_sample_labels_match_their_worked_solutions():
    # The reward must accept the reference solution's own final line for every problem.
    for line, item in zip(SAMPLE_PATH.read_text().splitlines(), load_gsm8k_jsonl(SAMPLE_PATH)):
        solution = json.loads(line)["answer"].split("####")[0]
        assert math_reward(solution, item["label"]) == 1.0, item["id"]


def test_blank_lines_skipped_and_ids_kept(tmp_path):
    path = tmp_path / "mini.jsonl"
    path.write_text(
        json.dumps({"question": "1+1?", "answer": "#### 2"})
        + "\n\n"
        + json.dumps({"id": "q7", "question": "2+2?", "answer": "so 4\n#### 4"})
        + "\n"
    )
    items = load_gsm8k_jsonl(path)
    assert [(x["id"], x["label"]) for x in items] == [("mini-1", "2"), ("q7", "4")]


@pytest.mark.parametrize(
    "bad_line, reason",
    [
        ('{"question": "q", "answer": "#### 1"', "not valid JSON"),
        ('["question", "answer"]', "expected a JSON object"),
        ('{"answer": "#### 1"}', "'question' is missing"),
        ('{"question": "q", "answer": 5}', "'answer' is missing or not a string"),
        ('{"question": "q", "answer": "it is 5"}', "no '#### <final answer>' marker"),
        ('{"question": "q", "answer": "5 ####  "}', "nothing after '####'"),
    ],
)
def test_malformed_line_names_file_and_line(tmp_path, bad_line, reason):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"question": "ok", "answer": "#### 1"}) + "\n" + bad_line + "\n")
    with pytest.raises(DatasetFormatError, match=rf"bad\.jsonl:2: .*{reason}"):
        load_gsm8k_jsonl(path)
