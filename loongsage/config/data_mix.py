"""The data mix's arithmetic, shared by the config rules (which refuse a mix that cannot hold its
proportions) and the data stream (which hands out each batch in them)."""

from __future__ import annotations

from collections.abc import Sequence

from loongsage.config.schema import DataMixEntry

SINGLE_SOURCE = ""  # the source's name when data.mix is not set


def mix_shares(mix: Sequence[DataMixEntry], batch_size: int) -> dict[str, float]:
    """Each source's prompts per batch, `batch_size * weight / total weight`, not rounded: the rules
    refuse a share that is not a whole number >= 1. Without a mix the single source takes all."""
    if not mix:
        return {SINGLE_SOURCE: float(batch_size)}
    total = sum(entry.weight for entry in mix)
    return {entry.name: batch_size * entry.weight / total for entry in mix}
