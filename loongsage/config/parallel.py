"""How many ranks the trainer runs and over how many data-parallel shards a batch is split:
one answer to each, for the rules, the placement and TrainGroup alike.

trainer.backend=fsdp (and any backend but megatron): `trainer.world_size` ranks, each its own
data-parallel shard. trainer.backend=megatron: `trainer.megatron.tp * pp * dp` ranks, and
`trainer.megatron.dp` shards (the tp * pp ranks of one model copy share a shard).
`trainer.megatron.ep` adds no ranks: megatron carves expert-parallel groups out of them.

`trainer` is a `TrainerConfig` or anything with its attribute names. Pure: no torch, no Ray.
"""

from __future__ import annotations

MEGATRON = "megatron"  # the trainer.backend whose ranks come from trainer.megatron.tp / pp / dp
MEGATRON_RANKS = "trainer.megatron.tp * trainer.megatron.pp * trainer.megatron.dp"
# The trainer.backend values whose workers read trainer.moe.* (the routers' RL settings).
MOE_SETTINGS_BACKENDS = ("fsdp", MEGATRON)


def uses_megatron(trainer) -> bool:
    return trainer.backend == MEGATRON


def train_ranks(trainer) -> int:
    """Trainer ranks (Ray actors, one per device): trainer.world_size, or tp * pp * dp under megatron."""
    if uses_megatron(trainer):
        m = trainer.megatron
        return m.tp * m.pp * m.dp
    return trainer.world_size


def data_parallel_size(trainer) -> int:
    """Data-parallel shards of every batch: trainer.world_size (each fsdp rank is one), or trainer.megatron.dp."""
    return trainer.megatron.dp if uses_megatron(trainer) else trainer.world_size


def train_ranks_named(trainer) -> tuple[str, str]:
    """The fields `train_ranks` multiplies and their values, for messages: ("trainer.world_size", "2")
    or ("trainer.megatron.tp * trainer.megatron.pp * trainer.megatron.dp", "2 * 1 * 2")."""
    if uses_megatron(trainer):
        m = trainer.megatron
        return MEGATRON_RANKS, f"{m.tp} * {m.pp} * {m.dp}"
    return "trainer.world_size", str(trainer.world_size)


def data_parallel_key(trainer) -> str:
    """The field `data_parallel_size` reads."""
    return "trainer.megatron.dp" if uses_megatron(trainer) else "trainer.world_size"


def expert_parallel_problem(tp: int, dp: int, ep: int) -> str | None:
    """Why megatron cannot form expert-parallel groups of `ep` ranks, or None. Its rule, with
    experts never split over tensor-parallel ranks (expert_tensor_parallel_size 1): each
    pipeline stage's tp * dp ranks split into groups of ep (world = pp * ep * expert_dp)."""
    if ep < 1:
        return f"trainer.megatron.ep={ep} must be >= 1"
    if (tp * dp) % ep:
        return (
            f"trainer.megatron.ep={ep} must divide trainer.megatron.tp * trainer.megatron.dp = {tp} * {dp} = {tp * dp}: "
            f"megatron forms the expert-parallel groups out of each pipeline stage's tensor- and data-parallel ranks"
        )
    return None
