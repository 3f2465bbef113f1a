"""The prompt stream: data-source items in a seeded order, with a resumable position."""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Sequence

from loongsage.config import DataConfig, DataMixEntry
from loongsage.tasks.registry import get_data_source


@dataclass
class Prompt:
    item_id: str
    messages: list[dict]
    label: str
    token_ids: list[int]
    text: str


class PromptStream:
    """Epoch after epoch over the data set; each epoch in its own seeded shuffle.

    The position (epoch, index) is all the state there is, so a checkpoint that stores
    it resumes on exactly the next prompt.
    """

    def __init__(self, cfg: DataConfig, tokenizer, seed: int):
        self.items: Sequence[dict] = _load_items(cfg)
        self.tokenizer = tokenizer
        self.system_prompt = cfg.system_prompt
        self.shuffle = cfg.shuffle
        self.seed = seed
        self.epoch = 0
        self.index = 0
        self._order = self._epoch_order()

    def take(self, count: int) -> list[Prompt]:
        """The next `count` items as chat-templated prompts."""
        return [self._encode(item) for item in self.take_items(count)]

    def take_items(self, count: int) -> list[dict]:
        """The next `count` items as the data source gave them (agent episodes start from these)."""
        items = []
        for _ in range(count):
            if self.index == len(self._order):
                self.epoch, self.index = self.epoch + 1, 0
                self._order = self._epoch_order()
            items.append(self.items[self._order[self.index]])
            self.index += 1
        return items

    def take_tagged(self, count: int) -> list[tuple[str, dict]]:
        """`take_items` with the (empty) name of the one source each item came from."""
        return [("", item) for item in self.take_items(count)]

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "index": self.index}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.index = state["epoch"], state["index"]
        self._order = self._epoch_order()

    def _epoch_order(self) -> list[int]:
        order = list(range(len(self.items)))
        if self.shuffle:
            random.Random(f"prompts:{self.seed}:{self.epoch}").shuffle(order)
        return order

    def _encode(self, item: dict) -> Prompt:
        messages = list(item["prompt"]) if not isinstance(item["prompt"], str) else [{"role": "user", "content": item["prompt"]}]
        if self.system_prompt is not None:
            messages = [{"role": "system", "content": self.system_prompt}, *messages]
        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        token_ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return Prompt(str(item["id"]), messages, str(item["label"]), token_ids, text)


class MixedPromptStream:
    """Several sources (`data.mix`), each giving its fixed share of every batch; the config
    rules guarantee the shares are whole numbers."""

    def __init__(self, cfg: DataConfig, tokenizer, seed: int):
        total = sum(entry.weight for entry in cfg.mix)
        self.shares = {entry.name: entry.weight / total for entry in cfg.mix}
        self.streams = {entry.name: PromptStream(_entry_config(cfg, entry), tokenizer, seed) for entry in cfg.mix}

    def take_tagged(self, count: int) -> list[tuple[str, dict]]:
        return [(name, item) for name, stream in self.streams.items()
                for item in stream.take_items(round(count * self.shares[name]))]

    def state_dict(self) -> dict:
        return {name: stream.state_dict() for name, stream in self.streams.items()}

    def load_state_dict(self, state: dict) -> None:
        missing = sorted(set(self.streams) - set(state))
        if missing:
            raise ValueError(f"the checkpoint has no data position for data.mix entries {missing}")
        for name, stream in self.streams.items():
            stream.load_state_dict(state[name])


def prompt_stream(cfg: DataConfig, tokenizer, seed: int) -> PromptStream | MixedPromptStream:
    return MixedPromptStream(cfg, tokenizer, seed) if cfg.mix else PromptStream(cfg, tokenizer, seed)


def _entry_config(cfg: DataConfig, entry: DataMixEntry) -> DataConfig:
    return DataConfig(source=entry.source, options=dict(entry.options), reward=entry.reward or cfg.reward,
                      shuffle=cfg.shuffle, system_prompt=entry.system_prompt)


def _load_items(cfg: DataConfig) -> Sequence[dict]:
    factory = get_data_source(cfg.source)
    try:
        items = factory(**dict(cfg.options))
    except TypeError as error:
        raise ValueError(f"data.options {dict(cfg.options)} do not fit data source {cfg.source!r}: {error}") from error
    if len(items) == 0:
        raise ValueError(f"data source {cfg.source!r} with data.options={dict(cfg.options)} has no items")
    return items
