"""A RolePlan made real: Ray placement groups, one per node, one bundle per device, and the
scheduling strategy that puts each role's actor on its planned bundle.

Each node's group is STRICT_PACK and every bundle asks for a sliver of the node's own
`node:<ip>` resource, so the group lands on the node the plan names and nowhere else.
Which GPU a bundle holds is Ray's choice, fixed when the group is created; so every bundle
is probed once (a task that reports `ray.get_gpu_ids()`) and the node's bundles are matched
to the planned devices in (device id) order, as the plan itself is ordered.

An engine spanning several devices sits in the bundle of its first device; the bundles of
its other devices are reserved for it (nothing else is scheduled there) and `Seat.gpus`
names them. An engine spanning nodes has one seat per node: its rollout seat (node rank 0) and a
follower seat on each further node (`follower_seats`). Colocated trainer and rollout share a
bundle, each asking for half of it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from loongsage.cluster.hosts import ray_gpu_ids
from loongsage.cluster.roles import RolePlan
from loongsage.config.roles_rules import ROLES

NODE_PIN = 0.001  # of the node's `node:<ip>` resource (1.0): enough to pin a bundle, never a limit


@dataclass(frozen=True)
class Seat:
    """One worker or engine of a role, placed: its bundles and the GPU ids Ray gave them."""

    role: str
    index: int
    node: str
    gpus: tuple[int, ...]
    placement_group: object
    bundle_indices: tuple[int, ...]
    share: float  # of each bundle's GPU and CPU: 1, or 1/2 where trainer and rollout are colocated

    def scheduling_strategy(self):
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        return PlacementGroupSchedulingStrategy(
            placement_group=self.placement_group,
            placement_group_bundle_index=self.bundle_indices[0],
            placement_group_capture_child_tasks=True,
        )

    def actor_options(self) -> dict:
        """Keyword arguments for `Actor.options(...)`: this seat's bundle and its share of it."""
        return {"scheduling_strategy": self.scheduling_strategy(), "num_gpus": self.share, "num_cpus": self.share}


@dataclass
class RolePlacement:
    plan: RolePlan
    groups: dict[str, object] = field(default_factory=dict)  # node -> its placement group
    seats_by_role: dict[str, list[Seat]] = field(default_factory=dict)
    followers: list[list[Seat]] = field(default_factory=list)  # per rollout engine, its seats on node ranks 1..

    def seats(self, role: str) -> list[Seat]:
        self.plan.slots(role)  # an unknown role fails by name
        return self.seats_by_role.get(role, [])

    def follower_seats(self, engine: int) -> list[Seat]:
        return self.followers[engine] if self.followers else []

    def remove(self) -> None:
        from ray.util import remove_placement_group

        for group in self.groups.values():
            remove_placement_group(group)
        self.groups.clear()


def bundles_by_node(plan: RolePlan) -> dict[str, list[int]]:
    """The planned devices of each node, in (node, device) order: one bundle each."""
    nodes: dict[str, list[int]] = {}
    for node, gpu in plan.devices():
        nodes.setdefault(node, []).append(gpu)
    return nodes


def bundle_spec(node: str) -> dict[str, float]:
    return {"GPU": 1, "CPU": 1, f"node:{node}": NODE_PIN}


def place(plan: RolePlan, timeout_s: float = 120.0) -> RolePlacement:
    """Create the placement groups of `plan` (all of them, or none) and seat every role."""
    import ray
    from ray.util import placement_group

    nodes = bundles_by_node(plan)
    known = sorted(node["NodeManagerAddress"] for node in ray.nodes() if node.get("Alive"))
    strangers = [node for node in nodes if node not in known]
    if strangers:
        raise ValueError(
            f"plan nodes {strangers} are not Ray nodes (Ray knows {known}); build the allocation "
            f"with loongsage.cluster.roles.allocation_from_ray(ray.nodes())"
        )
    placement = RolePlacement(plan)
    try:
        for node, gpus in nodes.items():
            placement.groups[node] = placement_group([bundle_spec(node) for _ in gpus], strategy="STRICT_PACK")
        for node, group in placement.groups.items():
            _wait_ready(group, node, len(nodes[node]), timeout_s)
        bundle_of = _match_bundles(placement.groups, nodes, timeout_s)
    except BaseException:
        placement.remove()
        raise
    placement.seats_by_role = {
        role: [_seat(plan, role, index, slot, placement.groups, bundle_of) for index, slot in enumerate(plan.slots(role))]
        for role in ROLES
    }
    placement.followers = [
        [_seat(plan, "rollout", index, slot, placement.groups, bundle_of) for slot in plan.followers(index)]
        for index in range(len(plan.rollout))
    ]
    return placement


def _wait_ready(group, node: str, bundles: int, timeout_s: float) -> None:
    import ray

    try:
        ray.get(group.ready(), timeout=timeout_s)
    except ray.exceptions.GetTimeoutError:
        raise TimeoutError(
            f"placement group of node {node} ({bundles} bundles of 1 GPU + 1 CPU) was not ready within "
            f"{timeout_s:.0f} s; free now: {ray.available_resources()}"
        ) from None


def _match_bundles(
    groups: dict[str, object], nodes: dict[str, list[int]], timeout_s: float
) -> dict[tuple[str, int], tuple[int, int]]:
    """(node, planned device) -> (bundle index, GPU id Ray gave that bundle)."""
    import ray

    # max_calls=0: the probe touches no GPU memory, so one worker may serve every bundle in turn.
    probe = ray.remote(num_gpus=1, num_cpus=0, max_calls=0)(ray_gpu_ids)
    probes = {
        node: [probe.options(scheduling_strategy=_strategy(group, index)).remote() for index in range(len(nodes[node]))]
        for node, group in groups.items()
    }
    bundle_of = {}
    for node, refs in probes.items():
        ray_gpus = [ids[0] for ids in ray.get(refs, timeout=timeout_s)]
        by_gpu = sorted(range(len(ray_gpus)), key=lambda index: ray_gpus[index])
        for planned, index in zip(nodes[node], by_gpu):
            bundle_of[(node, planned)] = (index, ray_gpus[index])
    return bundle_of


def _seat(plan: RolePlan, role: str, index: int, slot, groups: dict[str, object], bundle_of: dict) -> Seat:
    bundles = [bundle_of[(slot.node, gpu)] for gpu in slot.gpus]
    return Seat(
        role=role,
        index=index,
        node=slot.node,
        gpus=tuple(gpu for _, gpu in bundles),
        placement_group=groups[slot.node],
        bundle_indices=tuple(bundle for bundle, _ in bundles),
        share=1.0 / len(plan.roles_on(slot.node, slot.gpus[0])),
    )


def _strategy(group, index: int):
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    return PlacementGroupSchedulingStrategy(placement_group=group, placement_group_bundle_index=index)
