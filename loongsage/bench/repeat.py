"""Repeated, interleaved measurement of a baseline and ours, and how the benches print it.

One run of each side gave ratios that swung by a third on a shared machine (load from other
processes comes and goes over minutes). Running the two sides in turns (base, ours, base,
ours, ...) puts each pair close together in time, so a pair's ratio sees the same load on
both sides; the median of the pairs' ratios ignores an odd pair, and the range of the
ratios says how far one run can be trusted.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable, Sequence
from typing import TypeVar

Base = TypeVar("Base")
Ours = TypeVar("Ours")


def add_repeats_argument(parser: argparse.ArgumentParser, *aliases: str, default: int = 3) -> None:
    """`--repeats N` (and any older names of it): interleaved runs of each side, at least 1."""
    parser.add_argument(
        "--repeats",
        *aliases,
        dest="repeats",
        type=_at_least_one,
        default=default,
        help=f"interleaved runs of each side, base first (default {default}); the ratio printed is the median of the pairs'",
    )


def interleaved(baseline: Callable[[int], Base], ours: Callable[[int], Ours], repeats: int) -> tuple[list[Base], list[Ours]]:
    """Calls baseline(0), ours(0), baseline(1), ours(1), ... and returns each side's results in
    run order. The argument is the pair's index (for run directories, tags, progress)."""
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    base_results: list[Base] = []
    ours_results: list[Ours] = []
    for index in range(repeats):
        base_results.append(baseline(index))
        ours_results.append(ours(index))
    return base_results, ours_results


def pair_ratios(numerators: Sequence[float], denominators: Sequence[float]) -> list[float]:
    """Per pair, numerator / denominator (pairs are the same index on both sides)."""
    if len(numerators) != len(denominators):
        raise ValueError(f"{len(numerators)} values against {len(denominators)}: not pairs")
    return [n / d for n, d in zip(numerators, denominators)]


def ratio_line(label: str, ratios: Sequence[float], digits: int = 2) -> str:
    """'ratio (LABEL): median 1.52x over 3 interleaved pairs (range 1.40x-1.61x)'."""
    pairs = "pair" if len(ratios) == 1 else "pairs"
    return (
        f"ratio ({label}): median {statistics.median(ratios):.{digits}f}x over {len(ratios)} interleaved {pairs} "
        f"(range {min(ratios):.{digits}f}x-{max(ratios):.{digits}f}x)"
    )


def runs_note(values: Sequence[float], digits: int = 1) -> str:
    """'median of 3 runs: 50.7, 49.2, 51.0' (run order), to follow a median in a table row."""
    runs = "run" if len(values) == 1 else "runs"
    return f"median of {len(values)} {runs}: " + ", ".join(f"{v:.{digits}f}" for v in values)


def _at_least_one(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value
