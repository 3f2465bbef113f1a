"""The rollout pipeline every run.mode runs (its settings per mode: run_modes.py).

A producer thread admits prompt groups whenever the staleness window allows, a pool runs
them (single completions or agent episodes, through the run's rollout source), and finished
groups wait in the pipeline buffer until a training step takes them. At each weight update
in-flight generation is either interrupted and continued with the new weights (partial
rollout) or, without partial rollouts, waited for.

Threads: the producer and the group pool are this object's; `close()` stops admitting and
the producer, `wait_for_groups()` waits for running groups once the engines are stopped (the
controller's shutdown order says when).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from dataclasses import replace
from typing import Protocol

import torch

from loongsage.algorithms.advantages import informative_groups
from loongsage.algorithms.staleness_windows import build_window
from loongsage.config import Config
from loongsage.config.run_modes import pipeline_settings
from loongsage.controller.data_stream import DataStream, Item
from loongsage.controller.pipeline import FinishedGroup, PipelineBuffer, TakeStats, ThreadedPipeline
from loongsage.inference.fleet import EngineFleet
from loongsage.sample import Sample

log = logging.getLogger(__name__)

PROMPT_GROUP_THREAD = "prompt-group"  # name prefix of the threads that run prompt groups


class RolloutSource(Protocol):
    """What turns one data item into its group of scored samples (single completions or agent
    episodes); `index` counts groups over the run from 0 and seeds and names the group."""

    def rollout_group(self, index: int, item: Item) -> list[Sample]: ...

    def close(self) -> None: ...


class RolloutPipeline:
    """Takes items from `data` (which replays a checkpoint's unsettled items first) and settles
    each once it is trained or dropped, so `data.state_dict()` is the whole data position."""

    def __init__(self, cfg: Config, data: DataStream, source: RolloutSource, engines: EngineFleet | None, first_index: int = 0):
        self.cfg = pipeline_settings(cfg)
        self.data = data
        self.source = source
        self.engines = engines
        self.batch_size = cfg.rollout.prompts_per_step
        max_inflight = self.cfg.max_inflight or self.batch_size * (1 + self.cfg.max_staleness)
        buffer = PipelineBuffer(build_window(self.cfg.window, self.batch_size, self.cfg.max_staleness), max_inflight)
        buffer.next_index = first_index  # seeds and ids continue across a resume
        self.pipeline = ThreadedPipeline(buffer)
        self._lock = threading.Lock()  # the items below
        self._items: dict[int, Item] = {}  # started and not yet trained or dropped, by group index
        self._pool = ThreadPoolExecutor(max_inflight, thread_name_prefix=PROMPT_GROUP_THREAD)
        self._running: set[Future] = set()
        self._producer = threading.Thread(target=self._produce, name="rollout-producer", daemon=True)
        self._producer.start()

    def take(self, version: int, stop: Callable[[], bool] = lambda: False) -> tuple[list[Sample], dict[str, float]]:
        """The next training batch for weights at `version` (blocks until it is ready), and the
        pipeline's metrics for this step. Once `stop()` is true the wait ends with StepInterrupted
        and every item stays unsettled (in the data stream's checkpoint state)."""
        groups, stats, _ = self.pipeline.take(version, self.cfg.batch_timeout_s, stop)
        self._settle([*(group.index for group in groups), *stats.dropped])
        samples = [sample for group in groups for sample in group.payload]
        if self.cfg.mask_stale_tokens:
            samples = [mask_stale_tokens(sample) for sample in samples]
        return samples, self._metrics(samples, stats, version)

    def update_weights(self, push: Callable[[], None]) -> None:
        """Run `push` (which loads new weights into the engines) at a safe point for generation,
        then let the window move on by one version."""
        if self.cfg.partial_rollout:
            with self.engines.weight_update(interrupt=True):
                push()
        else:
            self.pipeline.wait_until_idle(self.cfg.batch_timeout_s)
            push()
        self.pipeline.published()

    def close(self) -> None:
        """Start nothing more; groups already running go on (see `wait_for_groups`)."""
        self.pipeline.close()
        self._producer.join(timeout=10)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def wait_for_groups(self, timeout: float) -> int:
        """Wait for running groups to end (they end fast once the engines are stopped); how many
        are still running after `timeout`."""
        _, running = futures_wait(list(self._running), timeout)
        return len(running)

    def _produce(self) -> None:
        while (index := self.pipeline.start()) is not None:
            try:
                item = self.data.take()
                with self._lock:
                    self._items[index] = item
                future = self._pool.submit(self._run_group, index, item)
                self._running.add(future)
                future.add_done_callback(self._running.discard)
            except Exception as exc:  # the data source broke: nothing more can start
                log.exception("rollout producer failed")
                self.pipeline.fail(exc)
                return

    def _settle(self, indices: list[int]) -> None:
        with self._lock:
            items = [self._items.pop(index) for index in indices if index in self._items]
        for item in items:
            self.data.settle(item)

    def _run_group(self, index: int, item: Item) -> None:
        try:
            samples = self.source.rollout_group(index, item)
            if not samples:
                raise RuntimeError(f"prompt group {index} (item {item.id}) produced no samples")
            oldest, newest = _version_span(samples)
        except Exception as exc:  # reported to the trainer, which stops the run with it
            # One line here: the trainer raises it with this traceback chained, unless it turns out
            # to be an engine that died (then the run says so in one paragraph). Once closed, the
            # engines going away is what ended it.
            if not self.pipeline.closed:
                log.error("prompt group %d (item %s) failed: %s: %s", index, item.id, type(exc).__name__, exc)
            self.pipeline.fail(exc)
            return
        keep = not self.cfg.filter_zero_variance or _informative(samples)
        if not keep:
            self._settle([index])
        self.pipeline.finish(FinishedGroup(index, oldest, newest, samples, len(samples)), keep)

    def _metrics(self, samples: list[Sample], stats: TakeStats, version: int) -> dict[str, float]:
        buffer = self.pipeline.buffer
        trained = [(v, m) for s in samples for v, m in zip(s.weight_versions, s.loss_mask or [1] * len(s.weight_versions))]
        trained_tokens = sum(m for _, m in trained) or 1
        return {
            "async/staleness_mean": sum(stats.staleness) / len(stats.staleness),
            "async/staleness_max": float(max(stats.staleness)),
            "async/stale_token_frac": sum(m for v, m in trained if v < version) / trained_tokens,
            "async/buffer_ready": float(len(buffer.ready)),
            "async/running_groups": float(buffer.running),
            "async/dropped_stale": float(len(stats.dropped)),
            "async/dropped_total": float(buffer.dropped_stale),
            "async/filtered_total": float(buffer.filtered),
            "async/resumed_requests": float(sum(s.metadata.get("resumes", 0) for s in samples)),
        }


def mask_stale_tokens(sample: Sample) -> Sample:
    """The sample with loss mask 0 on tokens generated by older weights than its newest token
    (a partial rollout's tokens from before a weight update)."""
    if not sample.weight_versions:
        return sample
    newest = max(sample.weight_versions)
    mask = sample.loss_mask or [1] * len(sample.response_ids)
    return replace(sample, loss_mask=[m if v == newest else 0 for m, v in zip(mask, sample.weight_versions)])


def _version_span(samples: list[Sample]) -> tuple[int, int]:
    """Versions of the oldest and newest trained token (all tokens if none is trained)."""
    trained = [v for s in samples for v, m in zip(s.weight_versions, s.loss_mask or [1] * len(s.weight_versions)) if m]
    versions = trained or [v for s in samples for v in s.weight_versions]
    if not versions:
        raise RuntimeError("the group's samples carry no token weight versions")
    return min(versions), max(versions)


def _informative(samples: list[Sample]) -> bool:
    rewards = torch.tensor([s.reward for s in samples], dtype=torch.float32)
    return bool(informative_groups(rewards, torch.zeros(len(samples), dtype=torch.long)).any())
