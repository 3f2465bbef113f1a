"""Which devices of a multi-GPU allocation each role gets: pure arithmetic, no Ray.

The allocation's devices are sorted by (node, device). The trainer takes the first
`roles.trainer.gpus` of them, then come the rollout engines (each engine `roles.rollout.tp`
consecutive devices on one node), then the teachers; so trainer shards and engines stay
node-local. Colocated (`run.placement`, see `cpu_placement.resolve_placement`) the rollout
engines sit on the trainer's own devices.

A request that cannot be met fails here, before anything starts, with the arithmetic in the
message. `placement.py` turns the plan into Ray placement groups.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from loongsage.config.schema import RolesConfig

ROLES = ("trainer", "rollout", "teacher")
# How messages name colocation: `auto` resolves to it for run.mode=sync.
COLOCATED = "colocated placement (run.placement=colocate, or auto with run.mode=sync)"


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
    rollout: tuple[Slot, ...] = ()
    teacher: tuple[Slot, ...] = ()
    colocate: bool = False

    def slots(self, role: str) -> tuple[Slot, ...]:
        if role not in ROLES:
            raise KeyError(f"unknown role {role!r}; roles are {', '.join(ROLES)}")
        return getattr(self, role)

    def devices(self) -> list[tuple[str, int]]:
        """Every (node, device) some role uses, once each, in (node, device) order."""
        seen: dict[tuple[str, int], None] = {}
        for role in ROLES:
            for slot in self.slots(role):
                for gpu in slot.gpus:
                    seen.setdefault((slot.node, gpu), None)
        return sorted(seen, key=lambda device: (node_sort_key(device[0]), device[1]))

    def roles_on(self, node: str, gpu: int) -> list[str]:
        """The roles that share this device (two only when colocated)."""
        return [role for role in ROLES if any(slot.node == node and gpu in slot.gpus for slot in self.slots(role))]

    def describe(self) -> str:
        lines = []
        for role in ROLES:
            for index, slot in enumerate(self.slots(role)):
                lines.append(f"{role}[{index}]: {slot.node} GPU {','.join(map(str, slot.gpus))}")
        return "\n".join(lines) or "not partitioned (local machine)"


def is_partitioned(roles: RolesConfig) -> bool:
    """All zeros, the default: the local machine, every component where it always ran."""
    return any(getattr(roles, role).gpus > 0 for role in ROLES)


def config_problems(roles: RolesConfig, colocate: bool) -> list[str]:
    """What is wrong with the roles on their own, before any allocation is known. `colocate`:
    run.placement resolved to colocate (trainer and rollout share devices)."""
    problems = [f"roles.{role}.gpus={getattr(roles, role).gpus} must be >= 0" for role in ROLES if getattr(roles, role).gpus < 0]
    rollout = roles.rollout
    if rollout.tp < 1:
        problems.append(f"roles.rollout.tp={rollout.tp} must be >= 1")
    elif rollout.gpus % rollout.tp:
        problems.append(
            f"roles.rollout.gpus={rollout.gpus} must be divisible by roles.rollout.tp={rollout.tp} "
            f"(each rollout engine takes tp devices)"
        )
    if colocate and roles.trainer.gpus != rollout.gpus:
        problems.append(
            f"{COLOCATED} puts the rollout engines on the trainer's devices: roles.trainer.gpus="
            f"{roles.trainer.gpus} must equal roles.rollout.gpus={rollout.gpus}; set both to the same "
            f"number, or run.placement=disaggregated"
        )
    return problems


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
    return RolePlan(
        trainer=tuple(Slot(node, (gpu,)) for node, gpu in devices[:trainer_gpus]),
        rollout=_engines(devices, rollout_start, rollout_gpus, roles.rollout.tp),
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


def _engines(devices: list[tuple[str, int]], start: int, count: int, tp: int) -> tuple[Slot, ...]:
    """Consecutive groups of tp devices from `start`; a group that would cross a node boundary fails."""
    engines = []
    for first in range(start, start + count, tp):
        group = devices[first : first + tp]
        node = group[0][0]
        on_node = [gpu for name, gpu in group if name == node]
        if len(on_node) < tp:
            raise ValueError(
                f"roles.rollout.tp={tp} does not fit on node {node} ({len(on_node)} GPUs left): rollout engine "
                f"{len(engines)} would span nodes {node} and {group[-1][0]}, and an engine never spans nodes; "
                f"the roles before it take the first {first} GPUs in (node, device) order; change roles.trainer.gpus, "
                f"roles.rollout.gpus or roles.rollout.tp so that every engine's devices lie on one node"
            )
        engines.append(Slot(node, tuple(on_node)))
    return tuple(engines)
