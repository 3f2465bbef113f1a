"""The sampling block's rules: rollout.* and the agent options that override it per agent.

One set of ranges for both, because an override is sampled by the same engines under the same
RL assumptions as the run's own values. The system prompt is not an agent option: it lives in
data.system_prompt (per mixed source: data.mix[i].system_prompt), where every agent gets it.
"""

from __future__ import annotations

from typing import Any

from loongsage.config.schema import Config

# kind -> (type check, its rule, range check, its rule)
_NUMBER = (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool), "must be a number")
_INTEGER = (lambda v: isinstance(v, int) and not isinstance(v, bool), "must be an integer")
RULES = {
    "temperature": (*_NUMBER, lambda v: v > 0, "must be > 0 (RL needs sampled, not greedy, responses)"),
    "top_p": (*_NUMBER, lambda v: 0 < v <= 1, "must be in (0, 1]"),
    "top_k": (*_INTEGER, lambda v: v == -1 or v >= 1, "must be -1 (off) or >= 1"),
    "length": (*_INTEGER, lambda v: v >= 1, "must be >= 1"),  # new tokens per reply
}
# An agent option's name -> the kind of setting it overrides (max_tokens: rollout.max_new_tokens).
AGENT_OVERRIDES = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "max_tokens": "length"}


def sampling_problems(cfg: Config) -> list[str]:
    r = cfg.rollout
    problems = value_problems(
        [
            ("temperature", "rollout.temperature", r.temperature),
            ("top_p", "rollout.top_p", r.top_p),
            ("top_k", "rollout.top_k", r.top_k),
            ("length", "rollout.max_new_tokens", r.max_new_tokens),
        ],
        r.max_context,
    )
    for where, options in _agent_options(cfg):
        if "system_prompt" in options:
            problems.append(
                f"{where}.system_prompt: the system prompt is data.system_prompt "
                f"(or data.mix[i].system_prompt), one place for every agent"
            )
        overrides = [
            (kind, f"{where}.{name}", options[name]) for name, kind in AGENT_OVERRIDES.items() if options.get(name) is not None
        ]  # null: not overridden
        problems.extend(value_problems(overrides, r.max_context))
    return problems


def value_problems(settings: list[tuple[str, str, Any]], max_context: int) -> list[str]:
    """`settings`: (kind, field name, value) triples; each message names its field."""
    problems = []
    for kind, field, value in settings:
        is_type, type_rule, in_range, range_rule = RULES[kind]
        if not is_type(value):
            problems.append(f"{field}={value!r} {type_rule}")
        elif not in_range(value):
            problems.append(f"{field}={value} {range_rule}")
        elif kind == "length" and value >= max_context:
            problems.append(f"{field}={value} must be below rollout.max_context={max_context}")
    return problems


def _agent_options(cfg: Config) -> list[tuple[str, dict]]:
    return [
        ("agent.options", dict(cfg.agent.options)),
        *((f"data.mix[{i}].agent_options", dict(entry.agent_options)) for i, entry in enumerate(cfg.data.mix)),
    ]
