"""Mixed data sources: fixed shares in every batch, resumable positions, config arithmetic."""

from __future__ import annotations

import pytest

from loongsage.config import Config, ConfigError, DataMixEntry, check
from loongsage.controller.data_stream import DataStream


def mixed_config(prompts_per_step: int, weights: tuple[float, float]) -> Config:
    cfg = Config()
    cfg.agent.name = "tool"
    cfg.rollout.prompts_per_step, cfg.rollout.group_size, cfg.trainer.micro_batch_size = prompts_per_step, 2, 1
    cfg.data.mix = [
        DataMixEntry(name="swe", source="swe_tasks", options={"difficulty": "easy"}, reward="swe", weight=weights[0]),
        DataMixEntry(
            name="math", source="synthetic_arithmetic", reward="math", weight=weights[1], agent="chat", system_prompt="Be brief."
        ),
    ]
    return cfg


def test_every_batch_holds_the_proportions_and_resumes_where_it_stopped():
    cfg = mixed_config(4, (3, 1))
    check(cfg)
    stream = DataStream(cfg.data, 4, seed=0)
    for _ in range(20):  # past the end of the 34 easy tasks: epochs roll over per source
        batch = [stream.take() for _ in range(4)]
        assert [item.source for item in batch] == ["swe", "swe", "swe", "math"]
        for item in batch:
            stream.settle(item)
    state = stream.state_dict()
    assert state == {"next_index": {"swe": 60, "math": 20}, "pending": []}
    expected = [stream.take() for _ in range(4)]
    resumed = DataStream(cfg.data, 4, seed=0)
    resumed.load_state_dict(state)
    assert [item.id for item in (resumed.take() for _ in range(4))] == [item.id for item in expected]
    assert all("task" in item.data for item in expected if item.source == "swe")
    # Each source's own system prompt leads its items' chat.
    assert expected[3].messages[0] == {"role": "system", "content": "Be brief."}
    assert expected[0].messages[0]["role"] == "user"


def test_proportions_that_cannot_be_held_exactly_are_refused_with_the_arithmetic():
    with pytest.raises(ConfigError, match=r"data.mix\[0\] \(swe\): .* = 3 \* 1 / 2 = 1.5 prompts per step"):
        check(mixed_config(3, (1, 1)))
    cfg = mixed_config(4, (1, 1))
    cfg.agent.name = ""
    with pytest.raises(ConfigError, match="data.mix needs agent runs"):
        check(cfg)


def test_a_checkpoint_of_another_mix_is_refused_by_source_name():
    stream = DataStream(mixed_config(4, (3, 1)).data, 4, seed=0)
    with pytest.raises(ValueError, match=r"no data position for source\(s\) \['swe'\]"):
        stream.load_state_dict({"next_index": {"math": 3}, "pending": []})
