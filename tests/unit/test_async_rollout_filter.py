"""Dynamic filtering of zero-variance groups in the pipeline, with a stand-in rollout source
(the real one is exercised in tests/integration/test_async_rollout.py)."""
from __future__ import annotations

import threading

from loongsage.config import Config
from loongsage.controller.async_rollout import AsyncRollout, mask_stale_tokens
from loongsage.sample import Sample


class _Counter:
    def __init__(self):
        self.next = 0

    def state_dict(self) -> dict:
        return {"next": self.next}

    def load_state_dict(self, state: dict) -> None:
        self.next = state["next"]


class _Source:
    """Item k's group scores (1, 1) when k is even (no signal) and (0, 1) when odd."""

    def __init__(self):
        self.prompts = _Counter()
        self.version = 0  # the weights the stand-in engines serve
        self.started: list[int] = []
        self._lock = threading.Lock()

    def take_items(self, count: int) -> list[int]:
        first = self.prompts.next
        self.prompts.next += count
        return list(range(first, first + count))

    def rollout_group(self, index: int, item: int) -> list[Sample]:
        with self._lock:
            self.started.append(item)
        rewards = (1.0, 1.0) if item % 2 == 0 else (0.0, 1.0)
        return [Sample(prompt_ids=[1], response_ids=[2], weight_versions=[self.version], reward=r, group_id=index,
                       metadata={"item": item}) for r in rewards]


def test_sync_filtering_trains_only_informative_groups_and_keeps_generating():
    cfg = Config()
    cfg.run.mode, cfg.rollout.prompts_per_step = "sync", 3
    cfg.pipeline.filter_zero_variance = True
    source = _Source()
    rollout = AsyncRollout(cfg, source, rollout=None)
    try:
        for version in range(2):
            samples, metrics = rollout.take(version)
            items = {s.metadata["item"] for s in samples}
            assert len(items) == 3 and all(item % 2 == 1 for item in items)
            assert metrics["async/staleness_max"] == 0
            rollout.update_weights(lambda v=version + 1: setattr(source, "version", v))
        assert rollout.pipeline.buffer.filtered >= 5  # items 0, 2, 4, 6, 8 at least
    finally:
        rollout.close()


def test_checkpoint_state_lists_items_taken_but_not_trained():
    cfg = Config()
    cfg.run.mode, cfg.rollout.prompts_per_step = "sync", 2
    cfg.pipeline.filter_zero_variance = True
    source = _Source()
    rollout = AsyncRollout(cfg, source, rollout=None)
    try:
        samples, _ = rollout.take(0)
        state = rollout.checkpoint_state()
    finally:
        rollout.close()
    trained = {s.metadata["item"] for s in samples}
    pending = {position["next"] + offset for position, offset in state["pending"]}
    # Everything taken from the stream is trained, filtered (even items) or pending.
    taken = set(range(state["prompts"]["next"]))
    filtered = {item for item in source.started if item % 2 == 0}
    assert taken == trained | filtered | pending
    assert not trained & pending


def test_mask_stale_tokens_keeps_only_the_newest_version():
    sample = Sample(prompt_ids=[1], response_ids=[5, 6, 7, 8], loss_mask=[1, 1, 0, 1], weight_versions=[3, 3, 4, 4])
    assert mask_stale_tokens(sample).loss_mask == [0, 0, 0, 1]
    assert sample.loss_mask == [1, 1, 0, 1], "the original sample is left as it was"
