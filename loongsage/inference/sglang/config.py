"""What an SGLang engine actor is given (`engine_cfg`), checked when the actor is constructed so
a wrong key or value fails at creation, naming it, not minutes later when the server dies; and
the LaunchSpec it makes of it.

`engine_cfg` holds the settings every engine takes (max_running, max_context, num_threads,
dtype, weight_version, seed) and a nested "sglang" dict: rollout.sglang's fields (SglangConfig)
and the engine's seat: index, tp, gpus, colocated, log_dir, and for an engine spanning nodes its
followers (one per further node: that node's devices and the Ray options that seat its actor).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from loongsage.config.schema import RolloutConfig, SglangConfig
from loongsage.inference.sglang.flags import LaunchSpec

_DEFAULTS = SglangConfig()


@dataclass(frozen=True)
class SglangSettings:
    # rollout.sglang (SglangConfig)
    command: tuple[str, ...] = tuple(_DEFAULTS.command)
    mem_fraction_static: float = _DEFAULTS.mem_fraction_static
    extra_args: tuple[str, ...] = tuple(_DEFAULTS.extra_args)
    startup_timeout_s: float = _DEFAULTS.startup_timeout_s
    max_restarts: int = RolloutConfig.max_engine_restarts  # rollout.max_engine_restarts
    # the engine's seat
    index: int = 0  # among the run's engines: names its log file, its ports, its messages
    tp: int = 1  # roles.rollout.tp
    ep: int = 1  # roles.rollout.ep
    gpus: tuple[int | str, ...] | None = None  # Seat.gpus; None: the devices Ray made visible to the actor
    colocated: bool = False  # trainer and rollout share devices: --enable-memory-saver
    log_dir: str | None = None  # None: a temporary directory
    # One per further node of an engine spanning nodes (node ranks 1..): {"gpus": [...] | None,
    # "ray_options": {...}}; the actor starts one SglangNodeActor on each.
    followers: tuple[dict, ...] = ()

    @property
    def nnodes(self) -> int:
        return 1 + len(self.followers)


@dataclass(frozen=True)
class EngineSettings:
    max_running: int = 32
    max_context: int = 2048
    num_threads: int | None = None  # the server's OMP_NUM_THREADS; None: one per core the actor has
    dtype: str = "auto"
    weight_version: str = "default"  # what the starting weights (and a restarted server's) carry
    seed: int | None = None
    return_routed_experts: bool = False  # the model has experts and the rollout compares or replays their routing
    sglang: SglangSettings = field(default_factory=SglangSettings)

    @classmethod
    def from_dict(cls, engine_cfg: Mapping | None) -> EngineSettings:
        cfg = dict(engine_cfg or {})
        _refuse_unknown(cfg, cls, "engine_cfg")
        sglang = dict(cfg.pop("sglang", None) or {})
        _refuse_unknown(sglang, SglangSettings, "engine_cfg['sglang']")
        for key in ("command", "extra_args"):
            if key in sglang:
                sglang[key] = _strings(sglang[key], f"rollout.sglang.{key}")
        if sglang.get("gpus") is not None:
            sglang["gpus"] = tuple(sglang["gpus"])
        sglang["followers"] = tuple(_follower(f, i + 1) for i, f in enumerate(sglang.get("followers") or ()))
        _check_types(cfg, "engine_cfg")
        _check_types(sglang, "engine_cfg['sglang']")
        settings = cls(**cfg, sglang=SglangSettings(**sglang))
        _check(settings)
        return settings


_INTS = {"max_running", "max_context", "num_threads", "seed", "max_restarts", "index", "tp", "ep"}
_NUMBERS = {"mem_fraction_static", "startup_timeout_s"}
_BOOLS = {"colocated", "return_routed_experts"}


def _check_types(cfg: dict, where: str) -> None:
    for key, value in cfg.items():
        if value is None:
            continue
        wrong = (
            (key in _INTS and (isinstance(value, bool) or not isinstance(value, int)))
            or (key in _NUMBERS and (isinstance(value, bool) or not isinstance(value, (int, float))))
            or (key in _BOOLS and not isinstance(value, bool))
        )
        if wrong:
            kind = "an integer" if key in _INTS else "a number" if key in _NUMBERS else "true or false"
            raise ValueError(f"{where}[{key!r}]={value!r}: must be {kind}")


def _refuse_unknown(cfg: dict, cls, where: str) -> None:
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(cfg) - known)
    if unknown:
        raise ValueError(f"unknown {where} key {unknown[0]!r} for rollout.engine=sglang (known: {sorted(known)})")


def _follower(follower, node_rank: int) -> dict:
    where = f"engine_cfg['sglang']['followers'][{node_rank - 1}]"
    if not isinstance(follower, Mapping) or set(follower) - {"gpus", "ray_options"}:
        raise ValueError(f"{where}={follower!r}: a dict of gpus (a list, or None) and ray_options")
    gpus = follower.get("gpus")
    return {"gpus": tuple(gpus) if gpus is not None else None, "ray_options": dict(follower.get("ray_options") or {})}


def _strings(value, name: str) -> tuple[str, ...]:
    # A bare string would be split into characters by tuple(); a list it was meant to be.
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise ValueError(f"{name}={value!r}: a list of strings, e.g. [python, -m, sglang.launch_server]")
    return tuple(str(item) for item in value)


def _check(settings: EngineSettings) -> None:
    sglang = settings.sglang
    if not sglang.command:
        raise ValueError("rollout.sglang.command is empty: the server command, e.g. [python, -m, sglang.launch_server]")
    if sglang.startup_timeout_s <= 0:
        raise ValueError(f"rollout.sglang.startup_timeout_s={sglang.startup_timeout_s}: must be positive")
    if sglang.max_restarts < 0:
        raise ValueError(f"rollout.max_engine_restarts={sglang.max_restarts}: must be at least 0")
    if sglang.index < 0:
        raise ValueError(f"engine_cfg['sglang']['index']={sglang.index}: must be at least 0")
    if sglang.tp % sglang.nnodes:
        raise ValueError(f"engine {sglang.index}: roles.rollout.tp={sglang.tp} does not split over its {sglang.nnodes} nodes")
    per_node = sglang.tp // sglang.nnodes
    for rank, gpus in enumerate([sglang.gpus, *(f["gpus"] for f in sglang.followers)]):
        if gpus is not None and len(gpus) != per_node:
            raise ValueError(
                f"engine {sglang.index}: node rank {rank} has {len(gpus)} device(s) {list(gpus)} but roles.rollout.tp="
                f"{sglang.tp} over {sglang.nnodes} node(s) is {per_node} per node: an engine runs on exactly tp devices"
            )
    if settings.num_threads is not None and settings.num_threads < 1:
        raise ValueError(f"rollout.num_threads={settings.num_threads}: must be at least 1")


def launch_spec(
    model_path: str,
    settings: EngineSettings,
    host: str,
    port: int,
    nccl_port: int,
    node_rank: int = 0,
    dist_init_addr: str | None = None,
) -> LaunchSpec:
    """The server's flags from what the actor was given and the ports it chose; for an engine
    spanning nodes, node rank `node_rank`'s, all meeting node rank 0 at `dist_init_addr`."""
    sglang = settings.sglang
    return LaunchSpec(
        model_path=str(model_path),
        host=host,
        port=port,
        nccl_port=nccl_port,
        tp_size=sglang.tp,
        ep_size=sglang.ep,
        enable_return_routed_experts=settings.return_routed_experts,
        dtype=settings.dtype,
        context_length=settings.max_context,
        max_running_requests=settings.max_running,
        weight_version=settings.weight_version,
        mem_fraction_static=sglang.mem_fraction_static,
        enable_memory_saver=sglang.colocated,
        # The server sees only its seat's devices (CUDA_VISIBLE_DEVICES), or only the actor's.
        base_gpu_id=0,
        nnodes=sglang.nnodes,
        node_rank=node_rank,
        dist_init_addr=dist_init_addr,
        random_seed=settings.seed,
        extra_args=sglang.extra_args,
    )
