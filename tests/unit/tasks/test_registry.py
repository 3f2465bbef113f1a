from __future__ import annotations

import pytest

from loongsage.agentflow.agents.base import AgentResult
from loongsage.registry import resolve
from loongsage.tasks.math.jsonl import load_gsm8k_jsonl
from loongsage.tasks.math.synthetic import SyntheticArithmetic
from loongsage.tasks.registry import REWARDS, get_data_source, get_reward

ITEM = {"id": "1", "prompt": "5 + 7?", "label": "12"}


def test_names_resolve():
    assert get_data_source("synthetic_arithmetic") is SyntheticArithmetic
    assert get_data_source("gsm8k_jsonl") is load_gsm8k_jsonl
    math = get_reward("math")
    assert math(ITEM, AgentResult("submitted", answer=r"\boxed{12}")) == (1.0, {})
    assert math(ITEM, AgentResult("max_turns")) == (0.0, {}), "no answer scores as an empty response"


def test_math_is_registered_once_for_completions_and_episodes_alike():
    assert sorted(REWARDS) == ["math", "swe"]
    with pytest.raises(ValueError, match="reward 'math' is already registered"):
        REWARDS.register("math", lambda item, result: (0.0, {}))


def test_import_path_fallback():
    assert get_reward("tests.toy_rewards:digit_fraction")(ITEM, AgentResult("submitted", answer="a1")) == (0.5, {})
    assert get_data_source("loongsage.tasks.math.synthetic:SyntheticArithmetic") is SyntheticArithmetic
    assert resolve({}, "os.path:join", "helper").__name__ == "join"


def test_unknown_name_lists_known_ones():
    with pytest.raises(ValueError, match=r"unknown reward 'maths'; known: math, swe, or"):
        get_reward("maths")
    with pytest.raises(ValueError, match="known: gsm8k_jsonl, swe_synth, swe_tasks, synthetic_arithmetic"):
        get_data_source("gsm8k")


def test_bad_import_paths_say_what_failed():
    with pytest.raises(ValueError, match="cannot import module 'no_such_pkg_xyz.mod'"):
        get_reward("no_such_pkg_xyz.mod:fn")
    with pytest.raises(ValueError, match="has no attribute 'nope'"):
        get_reward("loongsage.tasks.math.reward:nope")
    with pytest.raises(ValueError, match="not callable"):
        get_data_source("loongsage.tasks.math.jsonl:SAMPLE_PATH")
