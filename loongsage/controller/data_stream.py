"""The data stream: every data source's items in a seeded order, and the one record of where
the run stands in them.

An item is addressed by its cursor `(source, index)`: the `index`-th item a source gives over
the run (epoch `index // len`, each epoch in its own seeded shuffle). The stream hands items
out and is told when each is settled (trained, or dropped by the pipeline); a checkpoint holds
each source's next index and the cursor of every item handed out but not settled, so a
resumed run replays exactly those first and then goes on, losing none and repeating none.
"""

from __future__ import annotations

import random
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from loongsage.config import DataConfig
from loongsage.config.data_mix import SINGLE_SOURCE, mix_shares
from loongsage.tasks.registry import get_data_source


@dataclass(frozen=True)
class Item:
    """One data item on its way to rollout: the data source's dict (`id`, `prompt`, `label`, and
    whatever else the source carries, e.g. a SWE task) with where it came from."""

    source: str  # data.mix entry name; SINGLE_SOURCE without data.mix
    index: int  # its cursor in that source (see the module docstring)
    data: dict = field(compare=False, repr=False)
    system_prompt: str | None = field(default=None, compare=False, repr=False)

    @property
    def id(self) -> str:
        return str(self.data["id"])

    @property
    def label(self) -> str:
        return str(self.data["label"])

    @property
    def messages(self) -> list[dict]:
        """The chat that asks for this item: the source's system prompt, then the item's prompt."""
        prompt = self.data["prompt"]
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
        if self.system_prompt is not None:
            messages = [{"role": "system", "content": self.system_prompt}, *messages]
        return messages

    @property
    def prompt_text(self) -> str:
        """The user's part of the prompt as plain text (what an agent's task statement is)."""
        prompt = self.data["prompt"]
        if isinstance(prompt, str):
            return prompt
        return "\n\n".join(str(m.get("content", "")) for m in prompt if m.get("role") == "user")


class SourceOrder:
    """One data source's items, epoch after epoch, each epoch in its own seeded shuffle."""

    def __init__(self, name: str, items: Sequence[dict], system_prompt: str | None, shuffle: bool, seed: int):
        self.name, self.items, self.system_prompt = name, items, system_prompt
        self.shuffle, self.seed = shuffle, seed

    def item_at(self, index: int) -> Item:
        epoch, offset = divmod(index, len(self.items))
        return Item(self.name, index, self.items[self._epoch_order(epoch)[offset]], self.system_prompt)

    @lru_cache(maxsize=2)  # noqa: B019 - one stream per run; the current and the next epoch
    def _epoch_order(self, epoch: int) -> list[int]:
        order = list(range(len(self.items)))
        if self.shuffle:
            random.Random(f"prompts:{self.seed}:{epoch}").shuffle(order)
        return order


class DataStream:
    """Items for rollout, a batch's worth at a time in fixed per-source shares (`data.mix`; the
    config rules make every share a whole number), and the items not yet settled. Thread-safe:
    the rollout producer takes while the trainer's thread settles."""

    def __init__(self, cfg: DataConfig, batch_size: int, seed: int):
        entries = cfg.mix or [None]
        self.sources = {
            name: SourceOrder(name, _load_items(source, options), system_prompt, cfg.shuffle, seed)
            for name, source, options, system_prompt in (_entry(cfg, entry) for entry in entries)
        }
        self.shares = {name: round(share) for name, share in mix_shares(cfg.mix, batch_size).items()}
        self.next_index = dict.fromkeys(self.sources, 0)
        self._lock = threading.Lock()
        self._queued: deque[Item] = deque()  # to be handed out: replayed from a checkpoint, then the current batch
        self._unsettled: dict[tuple[str, int], Item] = {}  # queued or handed out, in the order taken

    def take(self) -> Item:
        with self._lock:
            if not self._queued:
                self._queue_batch()
            return self._queued.popleft()

    def settle(self, item: Item) -> None:
        """`item` is done with (trained, or dropped for good): a checkpoint no longer replays it."""
        with self._lock:
            self._unsettled.pop((item.source, item.index), None)

    def state_dict(self) -> dict:
        with self._lock:
            return {"next_index": dict(self.next_index), "pending": [list(key) for key in self._unsettled]}

    def load_state_dict(self, state: dict) -> None:
        unknown = sorted(set(self.sources) - set(state["next_index"]))
        if unknown:
            raise ValueError(
                f"the checkpoint has no data position for source(s) {unknown} (data.mix names must match the run that wrote it)"
            )
        with self._lock:
            self.next_index = {name: int(state["next_index"][name]) for name in self.sources}
            replay = [self.sources[source].item_at(int(index)) for source, index in state["pending"]]
            self._queued = deque(replay)
            self._unsettled = {(item.source, item.index): item for item in replay}

    def _queue_batch(self) -> None:
        # A whole batch at a time, so every batch holds the mix's proportions.
        for name, share in self.shares.items():
            for _ in range(share):
                item = self.sources[name].item_at(self.next_index[name])
                self.next_index[name] += 1
                self._queued.append(item)
                self._unsettled[(item.source, item.index)] = item


def _entry(cfg: DataConfig, entry) -> tuple[str, str, dict, str | None]:
    if entry is None:
        return SINGLE_SOURCE, cfg.source, dict(cfg.options), cfg.system_prompt
    return entry.name, entry.source, dict(entry.options), entry.system_prompt


def _load_items(source: str, options: dict) -> Sequence[dict]:
    factory = get_data_source(source)
    try:
        items = factory(**options)
    except TypeError as error:
        raise ValueError(f"data.options {options} do not fit data source {source!r}: {error}") from error
    if len(items) == 0:
        raise ValueError(f"data source {source!r} with data.options={options} has no items")
    return items


def from_legacy_state(checkpoint: dict, stream: DataStream) -> dict:
    """The data state of a checkpoint written before items had cursors: `prompts` held each
    stream's (epoch, index), and `pending` each unsettled item as (that state, offset in the
    batch taken from it)."""

    def cursor(name: str, position: dict) -> int:
        return position["epoch"] * len(stream.sources[name].items) + position["index"]

    def per_source(state: dict) -> dict:
        return {SINGLE_SOURCE: state} if set(stream.sources) == {SINGLE_SOURCE} else state

    def pending_at(state: dict, offset: int) -> list:
        batch = [(name, cursor(name, per_source(state)[name]) + k) for name, share in stream.shares.items() for k in range(share)]
        return list(batch[offset])

    return {
        "next_index": {name: cursor(name, position) for name, position in per_source(checkpoint["prompts"]).items()},
        "pending": [pending_at(state, offset) for state, offset in checkpoint.get("pending", [])],
    }
