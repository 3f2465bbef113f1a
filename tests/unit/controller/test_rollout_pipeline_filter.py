"""Dynamic filtering of zero-variance groups in the pipeline, and what its data stream keeps
unsettled, with a stand-in rollout source (the real one: tests/integration/controller/test_async_rollout.py)."""

from __future__ import annotations

import threading

from loongsage.config import Config
from loongsage.controller.data_stream import DataStream
from loongsage.controller.rollout_pipeline import RolloutPipeline, mask_stale_tokens
from loongsage.sample import Sample


class _Source:
    """An item whose number is even scores (1, 1) (no signal), an odd one (0, 1)."""

    def __init__(self):
        self.version = 0  # the weights the stand-in engines serve
        self.started: list[int] = []
        self._lock = threading.Lock()

    def rollout_group(self, index, item) -> list[Sample]:
        number = int(item.data["number"])
        with self._lock:
            self.started.append(number)
        rewards = (1.0, 1.0) if number % 2 == 0 else (0.0, 1.0)
        return [
            Sample(
                prompt_ids=[1],
                response_ids=[2],
                weight_versions=[self.version],
                reward=r,
                group_id=index,
                metadata={"item": number},
            )
            for r in rewards
        ]

    def close(self) -> None:
        pass


def numbered_items(count: int = 1000) -> list[dict]:
    return [{"id": str(n), "prompt": "?", "label": "", "number": n} for n in range(count)]


def _pipeline(batch: int) -> tuple[RolloutPipeline, DataStream, _Source]:
    cfg = Config()
    cfg.run.mode, cfg.rollout.prompts_per_step = "sync", batch
    cfg.pipeline.filter_zero_variance = True
    cfg.data.source, cfg.data.shuffle = "tests.unit.controller.test_rollout_pipeline_filter:numbered_items", False
    data, source = DataStream(cfg.data, batch, seed=0), _Source()
    return RolloutPipeline(cfg, data, source, engines=None), data, source


def test_sync_filtering_trains_only_informative_groups_and_keeps_generating():
    pipeline, _, source = _pipeline(3)
    try:
        for version in range(2):
            samples, metrics = pipeline.take(version)
            items = {s.metadata["item"] for s in samples}
            assert len(items) == 3 and all(item % 2 == 1 for item in items)
            assert metrics["async/staleness_max"] == 0
            pipeline.update_weights(lambda v=version + 1: setattr(source, "version", v))
        assert pipeline.pipeline.buffer.filtered >= 5  # items 0, 2, 4, 6, 8 at least
    finally:
        pipeline.close()


def test_the_data_state_lists_items_taken_but_not_settled():
    pipeline, data, source = _pipeline(2)
    try:
        samples, _ = pipeline.take(0)
        state = data.state_dict()
    finally:
        pipeline.close()
    trained = {s.metadata["item"] for s in samples}
    pending = {index for name, index in state["pending"]}
    # Everything taken from the stream is trained, filtered (even items) or pending: none twice.
    taken = set(range(state["next_index"][""]))
    filtered = {item for item in source.started if item % 2 == 0}
    assert taken == trained | filtered | pending
    assert not trained & pending and not filtered & pending


def test_mask_stale_tokens_keeps_only_the_newest_version():
    sample = Sample(prompt_ids=[1], response_ids=[5, 6, 7, 8], loss_mask=[1, 1, 0, 1], weight_versions=[3, 3, 4, 4])
    assert mask_stale_tokens(sample).loss_mask == [0, 0, 0, 1]
    assert sample.loss_mask == [1, 1, 0, 1], "the original sample is left as it was"
