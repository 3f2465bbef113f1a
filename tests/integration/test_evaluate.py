"""python -m loongsage.evaluate: a recipe's single-completion sources, asked on their eval split as
the run samples them, each answer scored by the source's reward."""

from __future__ import annotations

import json

from loongsage.evaluate import eval_sources, main
from tests.unit.config.test_rules import compose_config


def test_the_mopd_recipe_evaluates_each_domain_with_its_own_settings():
    sources = eval_sources(compose_config("recipe=mopd"))
    assert [(s.name, s.options, s.reward, s.max_new_tokens) for s in sources] == [
        ("sum", {}, "math", 40),
        ("product", {"operators": "*"}, "math", 40),
    ]
    assert all(s.system_prompt == "You are a concise math assistant." for s in sources)


def test_agent_sources_are_left_to_the_run():
    assert [s.name for s in eval_sources(compose_config("recipe=agentic_mix"))] == ["arithmetic"]
    assert eval_sources(compose_config("recipe=agentic_swe")) == []


def test_a_model_answers_every_source_and_the_rewards_are_written(tmp_path, capsys):
    out = tmp_path / "eval.json"
    code = main(["tiny", "recipe=mopd", "rollout.max_new_tokens=4", "--items", "3", "--samples", "2", "--json", str(out)])
    assert code == 0
    written = json.loads(out.read_text())
    assert written["items"] == 3 and written["samples"] == 2
    rewards = written["rewards"]["tiny"]
    assert set(rewards) == {"sum", "product"} and all(0.0 <= r <= 1.0 for r in rewards.values())
    table = capsys.readouterr().out
    assert "sum" in table and "product" in table and "tiny" in table
