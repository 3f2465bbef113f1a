from __future__ import annotations

import pytest

from loongsage.tasks.math.jsonl import load_gsm8k_jsonl
from loongsage.tasks.math.reward import math_reward
from loongsage.tasks.math.synthetic import SyntheticArithmetic
from loongsage.registry import resolve
from loongsage.tasks.registry import get_data_source, get_reward_fn


def test_names_resolve():
    assert get_data_source("synthetic_arithmetic") is SyntheticArithmetic
    assert get_data_source("gsm8k_jsonl") is load_gsm8k_jsonl
    assert get_reward_fn("math") is math_reward


def test_import_path_fallback():
    assert get_reward_fn("loongsage.tasks.math.reward:math_reward") is math_reward
    assert get_data_source("loongsage.tasks.math.synthetic:SyntheticArithmetic") is SyntheticArithmetic
    assert resolve({}, "os.path:join", "helper").__name__ == "join"


def test_unknown_name_lists_known_ones():
    with pytest.raises(ValueError, match=r"unknown reward function 'maths'; known: math, or"):
        get_reward_fn("maths")
    with pytest.raises(ValueError, match="known: gsm8k_jsonl, swe_synth, swe_tasks, synthetic_arithmetic"):
        get_data_source("gsm8k")


def test_bad_import_paths_say_what_failed():
    with pytest.raises(ValueError, match="cannot import module 'no_such_pkg_xyz.mod'"):
        get_reward_fn("no_such_pkg_xyz.mod:fn")
    with pytest.raises(ValueError, match="has no attribute 'nope'"):
        get_reward_fn("loongsage.tasks.math.reward:nope")
    with pytest.raises(ValueError, match="not callable"):
        get_data_source("loongsage.tasks.math.jsonl:SAMPLE_PATH")
