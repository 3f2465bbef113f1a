"""What an engine actor is launched with: where it sits (`EngineSeats`) and its settings
(`engine_cfg`, the actor's second constructor argument)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from loongsage.config import RolloutConfig


@dataclass(frozen=True)
class EngineSeats:
    """Where the engines sit, as the SGLang actor's launch flags need it: each engine's devices
    (None: not partitioned; node rank 0's for an engine spanning nodes), its further nodes,
    devices per engine, shared with the trainer or not, its log dir, and the first engine's
    index (its ports and log file; a teacher fleet's engines follow the rollout engines'), and
    whether they return the experts they route each token to (R3: the rollout's MoE policy)."""

    gpus: list[list[int]] | None = None
    followers: list[list[dict]] | None = None  # ActorPlacement.engine_followers
    tp: int = 1
    ep: int = 1  # of an MoE model, within the tp devices (SGLang's --ep-size)
    routed_experts: bool = False
    colocated: bool = False
    log_dir: str | None = None
    first_index: int = 0


def engine_cfg(cfg: RolloutConfig, seat: int, cpus: list[int] | None, seats: EngineSeats, weight_version: str) -> dict:
    """One engine's settings: the serving limits every engine takes, and for the SGLang actor
    its launch settings (the other engines have no devices, ports or processes of their own).
    `seat`: its entry of `seats`; `weight_version`: what its starting weights carry (a rollout
    engine's 0, a teacher's name)."""
    settings = {
        "max_running": cfg.max_running,
        "max_context": cfg.max_context,
        "num_threads": len(cpus) if cpus else cfg.num_threads,
        "dtype": cfg.dtype,
        "weight_version": weight_version,
        "return_routed_experts": seats.routed_experts,
    }
    if cfg.engine == "sglang":
        sglang = cfg.sglang if isinstance(cfg.sglang, dict) else dataclasses.asdict(cfg.sglang)
        settings["sglang"] = {
            **sglang,
            "index": seats.first_index + seat,
            "tp": seats.tp,
            "ep": seats.ep,
            "gpus": seats.gpus[seat] if seats.gpus else None,
            "followers": seats.followers[seat] if seats.followers else [],
            "colocated": seats.colocated,
            "log_dir": seats.log_dir,
            "max_restarts": cfg.max_engine_restarts,
        }
    return settings
