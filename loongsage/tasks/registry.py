"""Data sources and reward functions chosen in config by name or by import path.

A data source is a callable taking keyword parameters and returning a sequence of items
`{"id", "prompt": [chat messages], "label"}`; a reward function is
`fn(response: str, label: str) -> float`. Anything outside the framework is reached as
"package.module:attribute" without registering it here.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

from loongsage.tasks.math.jsonl import load_gsm8k_jsonl
from loongsage.tasks.math.reward import math_reward
from loongsage.tasks.math.synthetic import SyntheticArithmetic

DATA_SOURCES: dict[str, Callable[..., Any]] = {
    "synthetic_arithmetic": SyntheticArithmetic,
    "gsm8k_jsonl": load_gsm8k_jsonl,
}
REWARD_FUNCTIONS: dict[str, Callable[[str, str], float]] = {
    "math": math_reward,
}


def resolve(registry: Mapping[str, Callable[..., Any]], name_or_path: str, kind: str) -> Callable[..., Any]:
    """The registered entry `name_or_path`, else the object at "module:attribute".
    `kind` ("reward function", ...) only words the error messages."""
    if name_or_path in registry:
        return registry[name_or_path]
    if ":" not in name_or_path:
        raise ValueError(
            f"unknown {kind} {name_or_path!r}; known: {', '.join(sorted(registry))}, "
            f"or an import path 'package.module:attribute'"
        )
    module_name, _, attribute = name_or_path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"{kind} {name_or_path!r}: cannot import module {module_name!r} ({exc})") from exc
    target: Any = module
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise ValueError(f"{kind} {name_or_path!r}: module {module_name!r} has no attribute {attribute!r}")
        target = getattr(target, part)
    if not callable(target):
        raise ValueError(f"{kind} {name_or_path!r} is a {type(target).__name__}, not callable")
    return target


def get_data_source(name_or_path: str) -> Callable[..., Any]:
    return resolve(DATA_SOURCES, name_or_path, "data source")


def get_reward_fn(name_or_path: str) -> Callable[[str, str], float]:
    return resolve(REWARD_FUNCTIONS, name_or_path, "reward function")
