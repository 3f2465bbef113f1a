"""The command line and environment of one SGLang server: SGLang's `launch_server` flags from a
LaunchSpec, pure, so what a GPU machine would run is checked on any machine.

Every flag the framework derives from its own config is listed in DERIVED_FLAGS with the config
that sets it; `rollout.sglang.extra_args` may add any other flag, never one of those, because a
repeated flag silently overrides the derived one (argparse keeps the last) and the run would then
disagree with its own config.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# SGLang's --dtype choices.
DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")

# Flag -> the config (or the part of the framework) that sets it.
DERIVED_FLAGS = {
    "--model-path": "the run's model (model=...)",
    "--host": "the engine actor (this node's serving address)",
    "--port": "the engine actor (the Slurm job's port block, else a free port)",
    "--tp-size": "roles.rollout.tp",
    "--ep-size": "roles.rollout.ep",
    "--enable-return-routed-experts": "the model (set for a mixture of experts: the trainer compares and replays routing)",
    "--dtype": "rollout.dtype",
    "--context-length": "rollout.max_context",
    "--max-running-requests": "rollout.max_running",
    "--weight-version": "the run (the starting weights are version 0)",
    "--mem-fraction-static": "rollout.sglang.mem_fraction_static",
    "--enable-memory-saver": "the placement (set when trainer and rollout share devices)",
    "--base-gpu-id": "the engine's seat (CUDA_VISIBLE_DEVICES names its devices)",
    "--nccl-port": "the engine actor (next to --port)",
    "--nnodes": "the engine's seat",
    "--node-rank": "the engine's seat",
    "--dist-init-addr": "the engine's seat",
    "--skip-server-warmup": "the engine actor (readiness is probed with /health_generate)",
    "--random-seed": "engine_cfg seed",
}
# SGLang's other spellings of derived flags.
FLAG_ALIASES = {
    "--tp": "--tp-size",
    "--tensor-parallel-size": "--tp-size",
    "--ep": "--ep-size",
    "--expert-parallel-size": "--ep-size",
    "--model": "--model-path",
    "--nccl-init-addr": "--dist-init-addr",
}

# SGLang's /health_generate gives up after SGLANG_HEALTH_CHECK_TIMEOUT seconds (default 20); a
# weight broadcast can hold the scheduler longer than that, and the server is not unhealthy then.
HEALTH_CHECK_TIMEOUT_S = 300


@dataclass(frozen=True)
class LaunchSpec:
    model_path: str
    host: str
    port: int
    nccl_port: int
    tp_size: int = 1
    ep_size: int = 1
    enable_return_routed_experts: bool = False
    dtype: str = "auto"
    context_length: int | None = None
    max_running_requests: int | None = None
    weight_version: str = "default"
    mem_fraction_static: float = 0.8
    enable_memory_saver: bool = False  # colocated: the engine releases its memory while the trainer works
    base_gpu_id: int = 0
    nnodes: int = 1
    node_rank: int = 0
    dist_init_addr: str | None = None  # host:port of node rank 0; only read when nnodes > 1
    random_seed: int | None = None
    skip_server_warmup: bool = True
    extra_args: tuple[str, ...] = ()

    def __post_init__(self):
        _at_least(self.tp_size, 1, "tp_size", "roles.rollout.tp")
        _at_least(self.ep_size, 1, "ep_size", "roles.rollout.ep")
        if self.tp_size % self.ep_size:
            raise ValueError(
                f"LaunchSpec.ep_size={self.ep_size} (roles.rollout.ep) must divide tp_size={self.tp_size} (roles.rollout.tp)"
            )
        for field_name in ("port", "nccl_port"):
            port = getattr(self, field_name)
            if not 0 < port < 65536:
                raise ValueError(f"LaunchSpec.{field_name}={port}: not a port (1..65535)")
        if self.dtype not in DTYPES:
            raise ValueError(f"LaunchSpec.dtype={self.dtype!r} (rollout.dtype): SGLang's --dtype takes one of {DTYPES}")
        if not 0 < self.mem_fraction_static <= 1:
            raise ValueError(
                f"LaunchSpec.mem_fraction_static={self.mem_fraction_static} (rollout.sglang.mem_fraction_static): "
                f"a share of device memory, in (0, 1]"
            )
        _at_least(self.nnodes, 1, "nnodes", "engine_cfg.sglang.nnodes")
        if not 0 <= self.node_rank < self.nnodes:
            raise ValueError(
                f"LaunchSpec.node_rank={self.node_rank} (engine_cfg.sglang.node_rank): must be in 0..{self.nnodes - 1}"
            )
        if self.nnodes > 1 and not self.dist_init_addr:
            raise ValueError(
                f"LaunchSpec.nnodes={self.nnodes} needs dist_init_addr (engine_cfg.sglang.dist_init_addr): "
                f"host:port of the engine's node rank 0"
            )
        if self.context_length is not None:
            _at_least(self.context_length, 1, "context_length", "rollout.max_context")
        if self.max_running_requests is not None:
            _at_least(self.max_running_requests, 1, "max_running_requests", "rollout.max_running")
        _at_least(self.base_gpu_id, 0, "base_gpu_id", "the engine's seat")
        refuse_derived(self.extra_args)


def _at_least(value: int, least: int, field_name: str, config: str) -> None:
    if value < least:
        raise ValueError(f"LaunchSpec.{field_name}={value} ({config}): must be at least {least}")


def refuse_derived(extra_args: Sequence[str]) -> None:
    """A ValueError for the first entry of rollout.sglang.extra_args that repeats a derived flag."""
    for arg in extra_args:
        flag = FLAG_ALIASES.get(arg.split("=", 1)[0], arg.split("=", 1)[0])
        if flag in DERIVED_FLAGS:
            raise ValueError(
                f"rollout.sglang.extra_args has {arg!r}: {flag} is set by {DERIVED_FLAGS[flag]}; "
                f"set it there instead (extra_args may only add flags the framework does not derive)"
            )


def launch_flags(spec: LaunchSpec) -> list[str]:
    """SGLang's launch_server flags for `spec`; extra_args last, verbatim."""
    flags = [
        "--model-path", spec.model_path,
        "--host", spec.host,
        "--port", str(spec.port),
        "--nccl-port", str(spec.nccl_port),
        "--tp-size", str(spec.tp_size),
        "--dtype", spec.dtype,
        "--weight-version", spec.weight_version,
        "--mem-fraction-static", str(spec.mem_fraction_static),
        "--base-gpu-id", str(spec.base_gpu_id),
    ]  # fmt: skip
    if spec.context_length is not None:
        flags += ["--context-length", str(spec.context_length)]
    if spec.max_running_requests is not None:
        flags += ["--max-running-requests", str(spec.max_running_requests)]
    if spec.random_seed is not None:
        flags += ["--random-seed", str(spec.random_seed)]
    if spec.ep_size > 1:
        flags += ["--ep-size", str(spec.ep_size)]
    if spec.enable_return_routed_experts:
        flags.append("--enable-return-routed-experts")
    if spec.enable_memory_saver:
        flags.append("--enable-memory-saver")
    if spec.skip_server_warmup:
        flags.append("--skip-server-warmup")
    if spec.nnodes > 1:
        flags += ["--nnodes", str(spec.nnodes), "--node-rank", str(spec.node_rank), "--dist-init-addr", str(spec.dist_init_addr)]
    return [*flags, *spec.extra_args]


def launch_env(base: Mapping[str, str], gpus: Sequence[int | str] | None, threads: int | None) -> dict[str, str]:
    """The server's environment: `base` (the actor's), with its devices, its CPU threads and the
    SGLang settings a managed engine needs. A value already in `base` for an SGLang setting wins."""
    env = dict(base)
    if gpus:
        # All the seat's devices (Ray made only the first visible to the actor); the server counts
        # from the first of them, hence --base-gpu-id 0.
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(gpu) for gpu in gpus)
    if threads:
        # Ray starts its workers with OMP_NUM_THREADS=1; the server gets the actor's cores.
        env["OMP_NUM_THREADS"] = str(threads)
    env.setdefault("SGLANG_HEALTH_CHECK_TIMEOUT", str(HEALTH_CHECK_TIMEOUT_S))
    # SGLang's /health runs a generation by default (a second or more, 503 while paused); the
    # engine pool probes liveness with it, and readiness with /health_generate.
    env.setdefault("SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", "false")
    # Its output reaches the log as it is written, so a crash's last words are in the log tail.
    env["PYTHONUNBUFFERED"] = "1"
    return env
