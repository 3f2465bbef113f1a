"""Which devices of a multi-GPU allocation each role gets: pure arithmetic, no Ray.

The allocation's devices are sorted by (node, device). The trainer takes the first
`roles.trainer.gpus` of them, then come the rollout engines (each engine `roles.rollout.tp`
consecutive devices on one node, or whole nodes when tp is more than a node holds), then the
teachers; so trainer shards stay node-local and an engine spans nodes only when it must.
Colocated (`run.placement`, see `config/placement.py` `resolve_placement`) the rollout engines sit on
the trainer's own devices.

A request that cannot be met fails here, before anything starts, with the arithmetic in the
message. `placement.py` turns the plan into Ray placement groups.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from loongsage.config.roles_rules import COLOCATED, ROLES, config_problems
from loongsage.config.schema import RolesConfig


class NodeGpus(NamedTuple):
    """One node of the allocation: its name (hostname or IP, as Ray reports it) and its GPU ids."""

    node: str
    gpus: tuple[int, ...]


class Slot(NamedTuple):
    """Where one trainer worker, rollout engine or teacher runs: one node, the devices it uses there."""

    node: str
    gpus: tuple[int, ...]


@dataclass(frozen=True)
class RolePlan:
    """Per role, per worker (trainer, teacher) or engine (rollout): (node, [device ids])."""

    trainer: tuple[Slot, ...] = ()
    rollout: tuple[Slot, ...] = ()  # each engine's node rank 0 (where it serves HTTP)
    teacher: tuple[Slot, ...] = ()
    colocate: bool = False
    # Per engine, its slots on the further nodes it spans (node ranks 1..); () for a one-node engine.
    rollout_followers: tuple[tuple[Slot, ...], ...] = ()

    def slots(self, role: str) -> tuple[Slot, ...]:
        if role not in ROLES:
            raise KeyError(f"unknown role {role!r}; roles are {', '.join(ROLES)}")
        return getattr(self, role)

    def followers(self, engine: int) -> tuple[Slot, ...]:
        return self.rollout_followers[engine] if self.rollout_followers else ()

    def _all_slots(self, role: str) -> tuple[Slot, ...]:
        """A role's slots, with the rollout engines' further nodes."""
        extra = tuple(slot for engine in self.rollout_followers for slot in engine) if role == "rollout" else ()
        return self.slots(role) + extra

    def devices(self) -> list[tuple[str, int]]:
        """Every (node, device) some role uses, once each, in (node, device) order."""
        seen: dict[tuple[str, int], None] = {}
        for role in ROLES:
            for slot in self._all_slots(role):
                for gpu in slot.gpus:
                    seen.setdefault((slot.node, gpu), None)
        return sorted(seen, key=lambda device: (node_sort_key(device[0]), device[1]))

    def roles_on(self, node: str, gpu: int) -> list[str]:
        """The roles that share this device (two only when colocated)."""
        return [role for role in ROLES if any(slot.node == node and gpu in slot.gpus for slot in self._all_slots(role))]

    def describe(self) -> str:
        lines = []
        for role in ROLES:
            for index, slot in enumerate(self.slots(role)):
                lines.append(f"{role}[{index}]: {slot.node} GPU {','.join(map(str, slot.gpus))}")
                for rank, follower in enumerate(self.followers(index) if role == "rollout" else (), start=1):
                    lines.append(f"{role}[{index}] node rank {rank}: {follower.node} GPU {','.join(map(str, follower.gpus))}")
        return "\n".join(lines) or "not partitioned (local machine)"


def allocation_from_ray(nodes: list[dict]) -> list[NodeGpus]:
    """The allocation as `ray.nodes()` reports it: every alive node with GPUs, named by its IP
    (the `node:<ip>` resource placement pins bundles with). Ray numbers a node's GPUs 0..n-1."""
    return [
        NodeGpus(node["NodeManagerAddress"], tuple(range(int(node.get("Resources", {}).get("GPU", 0)))))
        for node in nodes
        if node.get("Alive") and int(node.get("Resources", {}).get("GPU", 0)) > 0
    ]


def partition(allocation: Iterable[tuple[str, Iterable[int]]], roles: RolesConfig, colocate: bool) -> RolePlan:
    """Give each role its devices, or fail with the arithmetic of why they do not fit.
    `colocate`: the rollout engines share the trainer's devices (run.placement resolved to colocate)."""
    problems = config_problems(roles, colocate)
    if problems:
        raise ValueError("; ".join(problems))
    nodes = _sorted_nodes(allocation)
    _check_total(nodes, roles, colocate)
    devices = [(node.node, gpu) for node in nodes for gpu in node.gpus]
    trainer_gpus, rollout_gpus = roles.trainer.gpus, roles.rollout.gpus
    rollout_start = 0 if colocate else trainer_gpus
    teacher_start = rollout_start + rollout_gpus
    engines = _engines(devices, rollout_start, rollout_gpus, roles.rollout.tp)
    return RolePlan(
        trainer=tuple(Slot(node, (gpu,)) for node, gpu in devices[:trainer_gpus]),
        rollout=tuple(engine[0] for engine in engines),
        rollout_followers=tuple(engine[1:] for engine in engines),
        teacher=tuple(Slot(node, (gpu,)) for node, gpu in devices[teacher_start : teacher_start + roles.teacher.gpus]),
        colocate=colocate,
    )


def node_sort_key(name: str) -> tuple:
    """node2 before node10, 10.0.0.9 before 10.0.0.10: numbers in names compare as numbers."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name))


def _sorted_nodes(allocation: Iterable[tuple[str, Iterable[int]]]) -> list[NodeGpus]:
    nodes = [NodeGpus(str(name), tuple(sorted(int(gpu) for gpu in gpus))) for name, gpus in allocation]
    names = [node.node for node in nodes]
    for node in nodes:
        if names.count(node.node) > 1:
            raise ValueError(f"node {node.node} appears {names.count(node.node)} times in the allocation")
        if len(set(node.gpus)) != len(node.gpus):
            raise ValueError(f"node {node.node} lists a GPU id twice in the allocation: {list(node.gpus)}")
    return sorted(nodes, key=lambda node: node_sort_key(node.node))


def _check_total(nodes: list[NodeGpus], roles: RolesConfig, colocate: bool) -> None:
    available = sum(len(node.gpus) for node in nodes)
    trainer, rollout, teacher = roles.trainer.gpus, roles.rollout.gpus, roles.teacher.gpus
    if colocate:
        needed = trainer + teacher
        sum_text = (
            f"{COLOCATED}: roles.trainer.gpus (shared with roles.rollout) + roles.teacher.gpus = {trainer} + {teacher} = {needed}"
        )
    else:
        needed = trainer + rollout + teacher
        sum_text = f"roles.trainer.gpus + roles.rollout.gpus + roles.teacher.gpus = {trainer} + {rollout} + {teacher} = {needed}"
    if needed > available:
        raise ValueError(f"{sum_text} > {available} GPUs in the allocation ({_shape(nodes)})")


def _shape(nodes: list[NodeGpus]) -> str:
    counts = [len(node.gpus) for node in nodes]
    if not nodes:
        return "no nodes with GPUs"
    if len(set(counts)) == 1:
        return f"{len(nodes)} node{'s' if len(nodes) > 1 else ''} x {counts[0]}"
    return f"{len(nodes)} nodes: " + ", ".join(f"{node.node} {len(node.gpus)}" for node in nodes)


def _engines(devices: list[tuple[str, int]], start: int, count: int, tp: int) -> list[tuple[Slot, ...]]:
    """Consecutive groups of tp devices from `start`, each as its slots in node-rank order: one
    slot on one node, or, when tp is more than a node holds, every device of each node it spans
    (SGLang's --nnodes: one server process per node, tp / nnodes devices each). A group that
    would take part of a node and part of another fails."""
    engines = []
    for first in range(start, start + count, tp):
        group = devices[first : first + tp]
        by_node: dict[str, list[int]] = {}
        for node, gpu in group:
            by_node.setdefault(node, []).append(gpu)
        slots = tuple(Slot(node, tuple(gpus)) for node, gpus in by_node.items())
        if len(slots) > 1 and not _whole_nodes(devices, slots):
            node = group[0][0]
            on_node = len(by_node[node])
            raise ValueError(
                f"roles.rollout.tp={tp} does not fit on node {node} ({on_node} GPUs left): rollout engine "
                f"{len(engines)} would span nodes {node} and {group[-1][0]} taking part of a node; an engine spans "
                f"nodes only as whole nodes of equal size (SGLang's --nnodes); the roles before it take the first "
                f"{first} GPUs in (node, device) order; change roles.trainer.gpus, roles.rollout.gpus or "
                f"roles.rollout.tp so that every engine lies on one node or on whole nodes"
            )
        engines.append(slots)
    return engines


def _whole_nodes(devices: list[tuple[str, int]], slots: tuple[Slot, ...]) -> bool:
    """Every slot is all of its node's devices, and the nodes are of one size."""
    held = {node: sum(1 for name, _ in devices if name == node) for node, _ in slots}
    return all(len(slot.gpus) == held[slot.node] for slot in slots) and len({len(slot.gpus) for slot in slots}) == 1
