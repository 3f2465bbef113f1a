"""Mixed data sources: fixed shares in every batch, resumable positions, config arithmetic."""
from __future__ import annotations

import pytest

from loongsage.config import Config, ConfigError, DataMixEntry, check
from loongsage.controller.prompts import MixedPromptStream
from loongsage.models import load_tokenizer


def mixed_config(prompts_per_step: int, weights: tuple[float, float]) -> Config:
    cfg = Config()
    cfg.agent.name = "tool"
    cfg.rollout.prompts_per_step, cfg.rollout.group_size, cfg.trainer.micro_batch_size = prompts_per_step, 2, 1
    cfg.data.mix = [DataMixEntry(name="swe", source="swe_tasks", options={"difficulty": "easy"}, reward="swe", weight=weights[0]),
                    DataMixEntry(name="math", source="synthetic_arithmetic", reward="math", weight=weights[1], agent="chat")]
    return cfg


def test_every_batch_holds_the_proportions_and_resumes_where_it_stopped(tiny_model_path):
    cfg = mixed_config(4, (3, 1))
    check(cfg)
    tokenizer = load_tokenizer(tiny_model_path)
    stream = MixedPromptStream(cfg.data, tokenizer, seed=0)
    for _ in range(20):  # past the end of the 34 easy tasks: epochs roll over per source
        batch = stream.take_tagged(4)
        assert [name for name, _ in batch] == ["swe", "swe", "swe", "math"]
    state = stream.state_dict()
    expected = stream.take_tagged(4)
    resumed = MixedPromptStream(cfg.data, tokenizer, seed=0)
    resumed.load_state_dict(state)
    assert [item["id"] for _, item in resumed.take_tagged(4)] == [item["id"] for _, item in expected]
    assert all("task" in item for name, item in expected if name == "swe")


def test_proportions_that_cannot_be_held_exactly_are_refused_with_the_arithmetic():
    with pytest.raises(ConfigError, match=r"data.mix\[0\] \(swe\): .* = 3 \* 1 / 2 = 1.5 prompts per step"):
        check(mixed_config(3, (1, 1)))
    cfg = mixed_config(4, (1, 1))
    cfg.agent.name = ""
    with pytest.raises(ConfigError, match="data.mix needs agent runs"):
        check(cfg)
