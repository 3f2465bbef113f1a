"""The sampling block's rules: rollout.* and the agent options overriding it share one set of
ranges, each message naming its field; the system prompt is data.system_prompt, not an agent option."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

from loongsage.config import Config, ConfigError, check, register, to_config
from tests.paths import RECIPES_DIR

register()


def compose_config(*overrides: str) -> Config:
    with initialize_config_dir(config_dir=str(RECIPES_DIR), version_base=None):
        return to_config(compose(config_name="config", overrides=list(overrides)))


def _problems(*overrides: str) -> str:
    with pytest.raises(ConfigError) as error:
        check(compose_config(*overrides))
    return str(error.value)


@pytest.mark.parametrize("recipe", ["agentic_swe", "agentic_mix", "blackbox_swe", "math_grpo"])
def test_the_recipes_pass(recipe):
    check(compose_config(f"recipe={recipe}", "model=tiny"))


def test_agentic_swe_keeps_its_system_prompt_in_data():
    cfg = compose_config("recipe=agentic_swe", "model=tiny")
    assert cfg.data.system_prompt.startswith("You fix bugs in Python code.")
    assert "system_prompt" not in cfg.agent.options and "temperature" not in cfg.agent.options


@pytest.mark.parametrize(
    "override, message",
    [
        ("++agent.options.temperature=0", "agent.options.temperature=0 must be > 0"),
        ("++agent.options.top_p=1.5", "agent.options.top_p=1.5 must be in (0, 1]"),
        ("++agent.options.top_k=0", "agent.options.top_k=0 must be -1 (off) or >= 1"),
        ("++agent.options.max_tokens=0", "agent.options.max_tokens=0 must be >= 1"),
        ("++agent.options.max_tokens=1024", "agent.options.max_tokens=1024 must be below rollout.max_context=1024"),
        ("++agent.options.temperature=hot", "agent.options.temperature='hot' must be a number"),
        ("++agent.options.top_k=2.5", "agent.options.top_k=2.5 must be an integer"),
    ],
)
def test_bad_agent_overrides_are_refused_naming_the_field(override, message):
    assert message in _problems("recipe=agentic_swe", "model=tiny", override)


def test_bad_mix_overrides_are_refused_naming_the_entry():
    problems = _problems(
        "recipe=agentic_mix",
        "model=tiny",
        "++data.mix.1.agent_options.temperature=0",
        "++data.mix.1.agent_options.max_tokens=5000",
    )
    assert "data.mix[1].agent_options.temperature=0 must be > 0" in problems
    assert "data.mix[1].agent_options.max_tokens=5000 must be below rollout.max_context=4096" in problems


def test_a_null_override_is_no_override():
    check(compose_config("recipe=agentic_swe", "model=tiny", "agent.options.max_tokens=null"))


@pytest.mark.parametrize(
    "override, field",
    [
        ("++agent.options.system_prompt=Be brief.", "agent.options.system_prompt"),
        ("++data.mix.0.agent_options.system_prompt=Be brief.", "data.mix[0].agent_options.system_prompt"),
    ],
)
def test_a_system_prompt_agent_option_points_to_data_system_prompt(override, field):
    recipe = "agentic_mix" if "mix" in field else "agentic_swe"
    problems = _problems(f"recipe={recipe}", "model=tiny", override)
    assert f"{field}: the system prompt is data.system_prompt (or data.mix[i].system_prompt)" in problems


@pytest.mark.parametrize(
    "override, message",
    [
        ("rollout.temperature=0", "rollout.temperature=0.0 must be > 0"),
        ("rollout.top_p=0", "rollout.top_p=0.0 must be in (0, 1]"),
        ("rollout.top_k=0", "rollout.top_k=0 must be -1 (off) or >= 1"),
        ("rollout.max_new_tokens=0", "rollout.max_new_tokens=0 must be >= 1"),
        ("rollout.max_new_tokens=1024", "rollout.max_new_tokens=1024 must be below rollout.max_context=1024"),
    ],
)
def test_the_rollout_block_has_the_same_rules(override, message):
    assert message in _problems("recipe=math_grpo", "model=tiny", override)
