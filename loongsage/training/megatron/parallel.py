"""megatron-core's parallel state for this rank: the tensor-, pipeline-, data- and
expert-parallel groups.

Expert parallelism adds no ranks: megatron carves its expert-parallel groups out of the
tp * dp ranks of each pipeline stage (world = pp * expert_tp * ep * expert_dp, with
expert_tp = 1 here, model._expert_settings), so `trainer.megatron.ep` must divide tp * dp. The
ep ranks of a group hold different experts of every MoE layer and share the tokens of their
data-parallel shards with each other; everything else stays as without experts."""

from __future__ import annotations

from dataclasses import dataclass

import torch.distributed as dist

from loongsage.config.parallel import expert_parallel_problem
from loongsage.config.schema import MegatronConfig
from loongsage.training.megatron import cpu_shims

# megatron-LM's offset for the tensor-parallel RNG stream (model_parallel_cuda_manual_seed):
# every tensor-parallel rank draws a different stream, data-parallel replicas the same one.
TENSOR_PARALLEL_SEED_OFFSET = 2718
# ... and for the experts' stream: one per expert-parallel rank (megatron-LM's values).
EXPERT_PARALLEL_SEED_OFFSET = 1024
EXPERT_PARALLEL_SEED_STRIDE = 100


@dataclass(frozen=True)
class Layout:
    """Where this rank sits; the groups are megatron's own."""

    tp_rank: int
    tp_size: int
    pp_rank: int
    pp_size: int
    dp_rank: int
    dp_size: int
    ep_rank: int
    ep_size: int
    tp_group: dist.ProcessGroup
    pp_group: dist.ProcessGroup
    # gloo over the data-parallel ranks, for the step's bookkeeping (token counts, metrics),
    # which lives in CPU tensors whatever the device (NCCL groups take only GPU tensors).
    dp_cpu_group: dist.ProcessGroup

    @property
    def is_last_stage(self) -> bool:
        return self.pp_rank == self.pp_size - 1


def init_model_parallel(layout: MegatronConfig, seed: int) -> Layout:
    """Collective over the (already joined) default group, whose size is tp * pp * dp."""
    from megatron.core import parallel_state as ps

    cpu_shims.install()
    expected = layout.tp * layout.pp * layout.dp
    if dist.get_world_size() != expected:
        raise ValueError(
            f"the trainer has {dist.get_world_size()} ranks but trainer.megatron.tp * pp * dp = "
            f"{layout.tp} * {layout.pp} * {layout.dp} = {expected}"
        )
    problem = expert_parallel_problem(layout.tp, layout.dp, layout.ep)
    if problem:
        raise ValueError(problem)
    ps.initialize_model_parallel(
        tensor_model_parallel_size=layout.tp,
        pipeline_model_parallel_size=layout.pp,
        expert_model_parallel_size=layout.ep,
        expert_tensor_parallel_size=1,
    )
    add_rng_streams(seed)
    return Layout(
        tp_rank=ps.get_tensor_model_parallel_rank(),
        tp_size=ps.get_tensor_model_parallel_world_size(),
        pp_rank=ps.get_pipeline_model_parallel_rank(),
        pp_size=ps.get_pipeline_model_parallel_world_size(),
        dp_rank=ps.get_data_parallel_rank(),
        dp_size=ps.get_data_parallel_world_size(),
        ep_rank=ps.get_expert_model_parallel_rank(),
        ep_size=ps.get_expert_model_parallel_world_size(),
        tp_group=ps.get_tensor_model_parallel_group(),
        pp_group=ps.get_pipeline_model_parallel_group(),
        dp_cpu_group=ps.get_data_parallel_group_gloo(),
    )


def add_rng_streams(seed: int) -> None:
    """megatron's named RNG streams for this rank (parallel state initialized), as megatron-LM's
    model_parallel_cuda_manual_seed seeds them: the tensor-parallel stream (attention dropout
    forks it) and the expert-parallel one (expert layers' initialization on a GPU forks it)."""
    from megatron.core import parallel_state as ps
    from megatron.core import tensor_parallel

    tracker = tensor_parallel.get_cuda_rng_tracker()
    tracker.reset()
    tracker.add("model-parallel-rng", seed + TENSOR_PARALLEL_SEED_OFFSET + ps.get_tensor_model_parallel_rank())
    expert_seed = (
        seed
        + EXPERT_PARALLEL_SEED_OFFSET
        + EXPERT_PARALLEL_SEED_STRIDE * ps.get_expert_model_parallel_rank()
        + ps.get_expert_tensor_parallel_rank()
    )
    tracker.add(tensor_parallel.get_expert_parallel_rng_tracker_name(), expert_seed)


def destroy_model_parallel() -> None:
    from megatron.core import parallel_state as ps

    if ps.model_parallel_is_initialized():
        ps.destroy_model_parallel()
