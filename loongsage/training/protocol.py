"""What TrainGroup needs from one rank of a training backend.

The HF/torch.distributed backend (`loongsage.training.fsdp.TrainWorker`) implements it;
a Megatron backend slots in by implementing the same methods. Every method except
`pid`, `warm_up`, `rendezvous_address` and `data_rank` is collective: the group calls it on all ranks at once.
"""

from __future__ import annotations

from typing import Protocol

from loongsage.sample import Sample
from loongsage.transfer.source_routes import SourceReport


class TrainBackend(Protocol):
    def pid(self) -> int:
        """This rank's process id."""

    def warm_up(self) -> None:
        """Import what `setup` will need: called on a spare process (run.spare_trainer) ahead of
        its adoption, so that a restart does not wait for it."""

    def rendezvous_address(self) -> tuple[str, int]:
        """Host and free port for the process group's TCP store (asked of rank 0)."""

    def setup(self, master_addr: str, master_port: int) -> None:
        """Join the process group; load the model, optimizer and reference model."""

    def data_rank(self) -> int:
        """This rank's data-parallel index, asked after setup; ranks with the same index get the same
        samples (the tensor- and pipeline-parallel peers of one model copy). Indices run 0..dp-1,
        each held by the same number of ranks."""

    def train_step(self, samples: list[Sample], policy_version: int | None = None) -> dict[str, float]:
        """One trainer step on this rank's shard; metrics are already global. `policy_version`
        is the weight version of the trainer's weights (read by algorithm.proximal=interpolate)."""

    def supervised_step(self, samples: list[Sample], lr: float) -> dict[str, float]:
        """One optimizer step on the NLL of the shard's masked tokens (a warm start), at `lr`."""

    def compute_logprobs(self, samples: list[Sample]) -> list[list[float]]:
        """Current policy's logprob of every response token of this rank's shard."""

    def compute_values(self, samples: list[Sample]) -> list[list[float]]:
        """The critic's value of every response token of this rank's shard (a backend whose
        trainers may have a critic: algorithm.advantage=gae)."""

    def save_checkpoint(self, path: str) -> None:
        """Write this rank's part of a checkpoint into the (scratch) directory `path`."""

    def load_checkpoint(self, path: str) -> int:
        """Restore from `path`; return the trainer step it was saved at."""

    def weight_source(self) -> str | None:
        """This rank's host if it holds a full replica once `push_weights` has gathered the
        weights (a source of the route plan), else None."""

    def push_weights(self, plan: dict, engine_urls: list[str], skip: list[str]) -> SourceReport | None:
        """Collective: gather the weights in lockstep; a source of `plan` (`Plan.to_dict()`)
        sends its routes to the engines and relays not in `skip` (`TrainRank.send_to_engines`),
        and returns what they moved; other ranks return None. The version switch is not the
        rank's: `TrainGroup.push_weights` coordinates the round."""

    def close(self) -> None:
        """Leave the process group."""
