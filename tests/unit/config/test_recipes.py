"""Every recipe composes with its own model, passes the config rules, and its agent (when it has
one) is built from the recipe's options: what the launch tests, which run only some recipes end to
end (CI time), would catch first in the others."""

from __future__ import annotations

import shutil

import pytest

from loongsage.agentflow.agents import build_agent
from tests.paths import RECIPES_DIR
from tests.unit.config.test_rules import compose_config

RECIPES = sorted(path.stem for path in (RECIPES_DIR / "recipe").glob("*.yaml"))
# The programs black-box presets run; a recipe whose program is missing here is composed only.
PROGRAMS = {"opencode": "opencode", "codex": "codex", "claude_code": "claude", "mini_swe_agent": "mini"}


@pytest.mark.parametrize("recipe", RECIPES)
def test_the_recipe_composes_passes_the_rules_and_builds_its_agent(recipe):
    cfg = compose_config(f"recipe={recipe}")
    assert cfg.run.name == recipe
    program = PROGRAMS.get(cfg.agent.name)
    if not cfg.agent.name or (program is not None and shutil.which(program) is None):
        return
    assert build_agent(cfg.agent.name, dict(cfg.agent.options)) is not None


def test_every_black_box_recipe_is_here():
    assert {"blackbox_opencode", "blackbox_swe", "blackbox_codex", "blackbox_claude_code"} <= set(RECIPES)


ALGORITHMS = sorted(path.stem for path in (RECIPES_DIR / "algorithm").glob("*.yaml"))


def _flat(node, prefix: str = "") -> dict:
    if not hasattr(node, "__dataclass_fields__"):
        return {prefix: node}
    flat = {}
    for name in node.__dataclass_fields__:
        flat.update(_flat(getattr(node, name), f"{prefix}.{name}" if prefix else name))
    return flat


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_an_algorithm_group_changes_only_the_algorithm(algorithm):
    plain = _flat(compose_config("recipe=math_grpo", "run.dir=runs/x"))  # the default dir holds the time
    swapped = _flat(compose_config("recipe=math_grpo", "run.dir=runs/x", f"algorithm={algorithm}"))
    changed = {key for key in plain if plain[key] != swapped[key]}
    assert all(key.startswith("algorithm.") for key in changed), changed
    assert changed or algorithm == "grpo"  # math_grpo is grpo


def test_an_algorithm_group_is_a_base_the_command_line_tunes():
    cfg = compose_config("recipe=math_grpo", "algorithm=dr_grpo", "algorithm.loss_norm_length=64")
    assert (cfg.algorithm.advantage, cfg.algorithm.loss_norm_length) == ("dr_grpo", 64)
    assert compose_config("recipe=math_grpo", "algorithm=dr_grpo").algorithm.loss_norm_length == 40  # rollout.max_new_tokens
    assert {"grpo", "dr_grpo", "rloo", "reinforce_pp", "gspo", "cispo", "m2po", "opsm", "icepop", "ppo"} <= set(ALGORITHMS)
