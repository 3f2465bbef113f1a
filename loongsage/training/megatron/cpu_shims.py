"""What megatron-core assumes about CUDA, answered for a machine without it.

megatron-core is written for GPUs. Run on CPU over gloo (tests, laptops, this project's CI),
it meets five assumptions, and without TransformerEngine one slip of its own (6.); each is
answered here, and nothing else in the backend branches on the device but the choice of MoE
token dispatcher (model.token_dispatcher). On a CUDA machine `install()` answers only 6. (where
TransformerEngine is missing) and `cuda_literals_on_cpu()` is a plain context: the real code
paths run untouched.

1. `torch.cuda.current_device()` is asked for the device of rotary tables, DDP grad buffers
   and the distributed optimizer's shards. Without CUDA it raises; here it answers "cpu".
2. Bookkeeping tensors are created with a literal `device="cuda"` (the optimizer's loss scale
   and found-inf flag, the grad-norm accumulator, the schedule's token counter) and grads are
   checked with `grad.type() == "torch.cuda.FloatTensor"`. `cuda_literals_on_cpu()` is a
   TorchFunctionMode that puts those tensors on the CPU, makes `.cuda()` a no-op and reports
   CPU tensor types under their CUDA names. It is entered only around megatron's optimizer
   and schedule calls, never around our own code, so its per-op cost stays out of the model
   math it would otherwise intercept... except the forward/backward the schedule drives
   (measured by `python -m loongsage.bench train --backend megatron`).
3. The CUDA RNG tracker: attention dropout runs inside `get_cuda_rng_tracker().fork()`, which
   saves and sets CUDA generator states. `CpuRNGStatesTracker` forks the CPU generator
   instead, so dropout under tensor parallelism stays reproducible per named stream.
4. Fused kernels (rope fusion, persistent layer norm, gradient-accumulation fusion, masked
   softmax and bias fusions) are CUDA-only: `CPU_OFF` lists the TransformerConfig fields the
   mapping turns off. (Sequence parallelism needs no switch: the all-gather buffer megatron
   takes from its GlobalMemoryBuffer is allocated on `torch.cuda.current_device()`, 1. above,
   and the norm it needs is ours, norm.py.)
5. `torch.cuda.synchronize()` is called by distributed checkpointing, synchronous saves included
   (before it copies tensors to write them). Without CUDA there is nothing to wait for: a no-op.
6. Not CUDA but TransformerEngine: the MoE router's gating linear (megatron 0.16,
   moe_utils.RouterGatingLinearFunction) asks `te_general_gemm is not None`, a name that module
   defines only when TransformerEngine imports; without it the router raises NameError. It is
   defined as None there, which selects megatron's own torch.mm path. Done wherever
   TransformerEngine is missing, a GPU machine without it included.

The MoE token dispatcher is not shimmed: megatron's `alltoall` dispatcher creates a
`torch.cuda.Stream` when it is built and moves its split sizes on it, so the CPU runs the
`allgather` dispatcher, which uses only collectives gloo has (model.token_dispatcher).
"""

from __future__ import annotations

import contextlib

import torch
from torch.overrides import TorchFunctionMode

# TransformerConfig fields that select CUDA-only kernels (see 4. above).
CPU_OFF = dict(
    apply_rope_fusion=False,
    persist_layer_norm=False,
    gradient_accumulation_fusion=False,
    bias_activation_fusion=False,
    masked_softmax_fusion=False,
    bias_dropout_fusion=False,
)


def has_cuda() -> bool:
    return torch.cuda.is_available()


def device() -> torch.device:
    """Where this rank's model and batches live: its current CUDA device, else the CPU."""
    return torch.device("cuda", torch.cuda.current_device()) if has_cuda() else torch.device("cpu")


def collective_backend() -> str:
    """NCCL between GPUs; gloo, which runs every collective megatron uses, on CPU."""
    return "nccl" if has_cuda() else "gloo"


def install() -> None:
    """Process-wide answers to 1., 3., 5. and 6.; idempotent; only 6. (where TransformerEngine is
    missing) where CUDA exists."""
    _define_missing_te_gemm()
    if has_cuda():
        return
    torch.cuda.current_device = _cpu_device
    torch.cuda.synchronize = _nothing_to_synchronize
    _install_cpu_rng_tracker()


def cuda_literals_on_cpu() -> contextlib.AbstractContextManager:
    """The context megatron's optimizer and schedule calls run in (see 2. above)."""
    return contextlib.nullcontext() if has_cuda() else _CudaLiteralsOnCpu()


def _define_missing_te_gemm() -> None:
    """See 6. above."""
    from megatron.core.transformer.moe import moe_utils

    if not hasattr(moe_utils, "te_general_gemm"):
        moe_utils.te_general_gemm = None


def _cpu_device() -> str:
    return "cpu"


def _nothing_to_synchronize(device=None) -> None:
    return None


class _CudaLiteralsOnCpu(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        device = kwargs.get("device")
        if device is not None and str(device).startswith("cuda"):
            kwargs["device"] = "cpu"
        if func is torch.Tensor.cuda:
            return args[0]
        if func is torch.Tensor.type and len(args) == 1 and not kwargs:
            name = func(*args)
            return name if ".cuda." in name else name.replace("torch.", "torch.cuda.", 1)
        return func(*args, **kwargs)


def _install_cpu_rng_tracker() -> None:
    from megatron.core.tensor_parallel import random as megatron_random

    if isinstance(megatron_random._CUDA_RNG_STATE_TRACKER, CpuRNGStatesTracker):
        return
    megatron_random._CUDA_RNG_STATE_TRACKER = CpuRNGStatesTracker()
    megatron_random._CUDA_RNG_STATE_TRACKER_INITIALIZED = True


def _tracker_base():
    from megatron.core.tensor_parallel.random import CudaRNGStatesTracker

    return CudaRNGStatesTracker


class CpuRNGStatesTracker(_tracker_base()):
    """megatron's named RNG streams over the CPU generator (see 3. above)."""

    def add(self, name: str, seed: int) -> None:
        self._is_initialized = True
        if seed in self.seeds_:
            raise ValueError(f"RNG seed {seed} is already tracked")
        if name in self.states_:
            raise ValueError(f"RNG stream {name!r} is already tracked")
        self.seeds_.add(seed)
        self.states_[name] = torch.Generator().manual_seed(seed).get_state()

    @contextlib.contextmanager
    def fork(self, name: str = "model-parallel-rng"):
        if name not in self.states_:
            raise KeyError(f"RNG stream {name!r} is not tracked")
        outside = torch.get_rng_state()
        torch.set_rng_state(self.states_[name])
        try:
            yield
        finally:
            self.states_[name] = torch.get_rng_state()
            torch.set_rng_state(outside)
