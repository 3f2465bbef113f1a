"""Which processes a device range names, for the plan CLI (`--trainer 0-7 --engines 8-15`).

Slots are every GPU of the topology in (host order, GPU index) order: on two 8-GPU hosts, slot 9
is the second host's GPU 1. A CPU-only host has no GPUs; it contributes `cpu_slots` process slots
in its place (CPU processes on it, numbered 0..cpu_slots-1), so `--trainer 0 --engines 1-3` on
two CPU hosts with 2 slots each puts the trainer and one engine on the first host and two engines
on the second. A range is comma-separated items: `N`, `A-B` (global slots, both ends included)
or `host:N`, `host:A-B` (that host's GPU indices, or process slots on a CPU host).
"""

from __future__ import annotations

from dataclasses import dataclass

from loongsage.transfer.routes import Endpoint
from loongsage.transfer.topology_model import TopologyModel


@dataclass(frozen=True)
class Slot:
    host: str
    index: int  # the GPU index on a GPU host, the process number on a CPU host
    gpu: bool


def all_slots(topology: TopologyModel, cpu_slots: int = 4) -> list[Slot]:
    slots = []
    for host in topology.hosts():
        gpus = len(topology.node(host).gpus)
        slots += [Slot(host, i, bool(gpus)) for i in range(gpus or cpu_slots)]
    return slots


def parse_slots(spec: str, topology: TopologyModel, cpu_slots: int = 4) -> list[Slot]:
    """The slots a range names, in the order written; ValueError for one that does not exist."""
    every = all_slots(topology, cpu_slots)
    chosen = []
    for item in (part.strip() for part in spec.split(",")):
        if not item:
            continue
        host, _, numbers = item.rpartition(":")
        if host:
            name = topology.host(host)
            here = [s for s in every if s.host == name]
            chosen += [_pick(here, n, f"{name} has {len(here)} slot(s)") for n in _numbers(numbers, item)]
        else:
            chosen += [_pick(every, n, f"the topology has {len(every)} slot(s)") for n in _numbers(numbers, item)]
    if not chosen:
        raise ValueError(f"device range {spec!r} names no device")
    twice = sorted({f"{s.host}:{s.index}" for s in chosen if chosen.count(s) > 1})
    if twice:
        raise ValueError(f"device range {spec!r} names {', '.join(twice)} twice")
    return chosen


def _numbers(text: str, item: str) -> list[int]:
    first, dash, last = text.partition("-")
    try:
        low, high = int(first), int(last if dash else first)
    except ValueError:
        raise ValueError(f"device range item {item!r}: expected N, A-B, host:N or host:A-B") from None
    if high < low:
        raise ValueError(f"device range item {item!r}: {high} < {low}")
    return list(range(low, high + 1))


def _pick(slots: list[Slot], n: int, size: str) -> Slot:
    if not 0 <= n < len(slots):
        raise ValueError(f"device {n} does not exist: {size}")
    return slots[n]


def sources_at(slots: list[Slot]) -> list[Endpoint]:
    """One trainer rank per slot, each holding a full replica."""
    return [Endpoint(f"trainer/{n}", "source", s.host, (s.index,) if s.gpu else ()) for n, s in enumerate(slots)]


def engines_at(slots: list[Slot], tp: int = 1) -> list[Endpoint]:
    """One engine per `tp` consecutive slots (its tensor-parallel ranks), all on one host."""
    if tp < 1 or len(slots) % tp:
        raise ValueError(f"{len(slots)} engine device(s) do not split into engines of tp={tp}")
    engines = []
    for n in range(len(slots) // tp):
        group = slots[n * tp : (n + 1) * tp]
        hosts = sorted({s.host for s in group})
        if len(hosts) > 1:
            raise ValueError(f"engine {n} (tp={tp}) would span hosts {', '.join(hosts)}; an engine lives on one host")
        if tp > 1 and not group[0].gpu:
            raise ValueError(f"engine {n}: tp={tp} on CPU host {hosts[0]}; CPU engines have tp=1")
        gpus = tuple(s.index for s in group) if group[0].gpu else ()
        engines.append(Endpoint(f"engine/{n}", "engine", hosts[0], gpus))
    return engines
