"""What one rank writes into, and reads back from, a checkpoint directory.

Layout (an HF model directory plus trainer state):
  config.json, tokenizer files, ...   copied from the model the run started from
  model.safetensors                   full weights, HF names, tied weights stored once
  optimizer.pt                        full (unsharded) optimizer state, keyed by HF names
  scheduler.pt                        learning-rate scheduler state
  trainer_state.json                  trainer step and world size
  rng/rank{r}.pt                      torch, python and numpy RNG state of rank r
The directory is made atomic by the caller (see loongsage.training.checkpoint_dir).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
from safetensors.torch import load_file
from torch import Tensor, nn

from loongsage.training.fsdp.parallel import (
    full_model_state,
    full_optimizer_state,
    load_full_model_state,
    load_full_optimizer_state,
)
from loongsage.training.hf_dir import MODEL_FILE, read_trainer_state, write_hf_dir, write_trainer_state
from loongsage.training.rank_process import rng_state, set_rng_state


def save_rank(
    out: Path,
    *,
    rank: int,
    world_size: int,
    step: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    tied_names: set[str],
    source_dir: Path,
) -> None:
    """Collective: every rank calls it; rank 0 writes the shared files."""
    weights = full_model_state(model)
    optimizer_state = full_optimizer_state(model, optimizer)
    (out / "rng").mkdir(parents=True, exist_ok=True)
    torch.save(rng_state(), out / "rng" / f"rank{rank}.pt")
    if rank != 0:
        return
    write_hf_dir(out, source_dir, hf_weights(weights, tied_names))
    torch.save(optimizer_state, out / "optimizer.pt")
    torch.save(scheduler.state_dict(), out / "scheduler.pt")
    write_trainer_state(out, {"step": step, "world_size": world_size})


def load_rank(
    src: Path,
    *,
    rank: int,
    world_size: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
) -> int:
    """Restore weights, optimizer, scheduler and this rank's RNG; return the trainer step."""
    state = read_trainer_state(src)
    load_full_model_state(model, load_file(src / MODEL_FILE))
    load_full_optimizer_state(model, optimizer, torch.load(src / "optimizer.pt", weights_only=True))
    scheduler.load_state_dict(torch.load(src / "scheduler.pt", weights_only=True))
    if state["world_size"] == world_size:
        set_rng_state(torch.load(src / "rng" / f"rank{rank}.pt", weights_only=False))
    elif rank == 0:
        warnings.warn(
            f"checkpoint {src} was written by {state['world_size']} ranks, this group has "
            f"trainer.world_size={world_size}: weights and optimizer restored, RNG state not",
            stacklevel=2,
        )
    return int(state["step"])


def hf_weights(weights: dict[str, Tensor], tied_names: set[str]) -> dict[str, Tensor]:
    """The tensors an HF checkpoint of this model holds: tied aliases dropped, contiguous."""
    return {name: tensor.contiguous() for name, tensor in weights.items() if name not in tied_names}
