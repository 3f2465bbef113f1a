"""Where every actor of the run goes: one decision for the trainer ranks, the rollout engines
and the teachers, made before any of them starts.

Not partitioned (every `roles.*.gpus` 0, the default): this machine, as always; no placement
groups. run.placement colocate pins nothing; disaggregated pins trainer ranks and engines to
disjoint cores (`config/placement.py` `split_cores`).

Partitioned: the Ray cluster's GPUs are split among the roles (`roles.partition`, which fails
with the arithmetic before anything is reserved), the plan becomes placement groups
(`placement.place`) and each actor gets its seat's Ray options. No core pinning then: the
controller's cores say nothing about other nodes, and a seat's bundle holds the CPU its actor
may use.
"""

from __future__ import annotations

from dataclasses import dataclass

from loongsage.cluster.placement import RolePlacement, Seat, place
from loongsage.cluster.roles import allocation_from_ray, partition
from loongsage.config.parallel import train_ranks, train_ranks_named
from loongsage.config.placement import resolve_placement, split_cores
from loongsage.config.roles_rules import is_partitioned


@dataclass
class ActorPlacement:
    placement: str  # run.placement resolved: colocate | disaggregated
    # Ray actor options of each trainer rank / engine (their placement-group seats); None: the groups' defaults.
    trainer_options: list[dict] | None = None
    engine_options: list[dict] | None = None
    # Cores of each trainer rank / engine (disaggregated on this machine); None: not pinned.
    trainer_cpus: list[list[int]] | None = None
    engine_cpus: list[list[int]] | None = None
    roles: RolePlacement | None = None  # the placement groups, when the roles are partitioned

    @property
    def engine_gpus(self) -> list[list[int]] | None:
        """Each engine's devices (all of an engine spanning several); None when not partitioned."""
        return [list(seat.gpus) for seat in self.seats("rollout")] if self.roles else None

    @property
    def engine_followers(self) -> list[list[dict]] | None:
        """Per engine, its further nodes when it spans several: each one's devices and Ray options
        (the SGLang actor's `followers`); None when not partitioned."""
        if not self.roles:
            return None
        return [
            [{"gpus": list(seat.gpus), "ray_options": seat.actor_options()} for seat in self.roles.follower_seats(index)]
            for index in range(len(self.seats("rollout")))
        ]

    def seats(self, role: str) -> list[Seat]:
        """The placed seats of `role` (trainer, rollout, teacher); none when not partitioned."""
        return self.roles.seats(role) if self.roles else []

    def remove(self) -> None:
        """Give the reserved devices back (after the actors on them are shut down). Idempotent."""
        if self.roles:
            self.roles.remove()

    def describe(self) -> str:
        if not self.roles:
            return _describe_cores(self)
        lines = [f"roles partitioned over Ray's GPUs, run.placement={self.placement}:"]
        for role in ("trainer", "rollout", "teacher"):
            for seat in self.seats(role):
                lines.append(f"  {role}[{seat.index}]: {seat.node} GPU {','.join(map(str, seat.gpus))} share {seat.share:g}")
                for rank, follower in enumerate(self.roles.follower_seats(seat.index) if role == "rollout" else (), start=1):
                    gpus = ",".join(map(str, follower.gpus))
                    lines.append(f"  {role}[{seat.index}] node rank {rank}: {follower.node} GPU {gpus}")
        return "\n".join(lines)


def place_actors(cfg) -> ActorPlacement:
    """Decide where the trainer ranks and engines of `cfg` run; Ray must be up when roles are partitioned."""
    placement = resolve_placement(cfg.run.placement, cfg.run.mode)
    if not is_partitioned(cfg.roles):
        ranks, named = train_ranks(cfg.trainer), train_ranks_named(cfg.trainer)
        trainer_cpus, engine_cpus = split_cores(placement, ranks, cfg.rollout.num_engines, ranks_named=named)
        return ActorPlacement(placement, trainer_cpus=trainer_cpus, engine_cpus=engine_cpus)
    import ray

    plan = partition(allocation_from_ray(ray.nodes()), cfg.roles, colocate=placement == "colocate")
    roles = place(plan)
    # Teacher seats are planned and reserved with the rest; the TeacherGroup's engines sit on them.
    return ActorPlacement(
        placement,
        trainer_options=[seat.actor_options() for seat in roles.seats("trainer")],
        engine_options=[seat.actor_options() for seat in roles.seats("rollout")],
        roles=roles,
    )


def check_one_per_actor(values: list | None, count: int, what: str, count_key: str) -> None:
    """Per-actor settings (options, cores) must come one for each of the `count_key`=`count` actors."""
    if values is not None and len(values) != count:
        raise ValueError(f"{what} has {len(values)} entries for {count_key}={count}: one per actor")


def _describe_cores(placement: ActorPlacement) -> str:
    if placement.trainer_cpus is None:
        return f"run.placement={placement.placement}: trainer ranks and engines share this machine's cores"
    ranks = "; ".join(f"trainer[{rank}] cores {_cores(cores)}" for rank, cores in enumerate(placement.trainer_cpus))
    engines = "; ".join(f"rollout[{index}] cores {_cores(cores)}" for index, cores in enumerate(placement.engine_cpus))
    return f"run.placement={placement.placement} on this machine: {ranks}; {engines}"


def _cores(cores: list[int]) -> str:
    return ",".join(map(str, cores))
