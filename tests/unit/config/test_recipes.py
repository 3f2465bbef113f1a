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
