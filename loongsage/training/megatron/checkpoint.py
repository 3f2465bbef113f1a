"""What the Megatron trainer writes into, and reads back from, a checkpoint directory.

Layout (an HF model directory, so the policy is usable as it stands, plus trainer state):
  config.json, tokenizer files, ...   copied from the model the run started from
  model.safetensors                   the policy gathered across tensor/pipeline ranks, HF names
  megatron/rank{r}.pt                 rank r's own shards: model, optimizer (torch state and fp32
                                      main parameters), RNG streams; exact resume at this layout
  trainer_state.json                  trainer step and the layout (tp, pp, dp) that wrote it
A resume at another layout loads the HF weights and starts the optimizer afresh, and says so.
The directory is made atomic by the caller (see loongsage.training.checkpoint_dir).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch

from loongsage.training.hf_dir import read_trainer_state, write_hf_dir, write_trainer_state
from loongsage.training.megatron.convert import host_weights, load_hf_weights
from loongsage.training.megatron.optim import inner_optimizers
from loongsage.training.rank_process import rng_state, set_rng_state


def save(out: Path, worker) -> None:
    """Collective: every rank writes its shards; rank 0 also writes the HF export."""
    (out / "megatron").mkdir(parents=True, exist_ok=True)
    torch.save(_rank_state(worker), out / "megatron" / f"rank{worker.rank}.pt")
    weights = dict(host_weights(worker.model.module, worker.spec))  # collective; filled on rank 0 only
    if worker.rank != 0:
        return
    write_hf_dir(out, worker.model_path, weights)
    write_trainer_state(out, {"step": worker.step, "megatron": _layout(worker)})


def load(src: Path, worker) -> int:
    """Restore this rank; return the trainer step the checkpoint was written at."""
    state = read_trainer_state(src)
    written_by = state.get("megatron")
    if written_by == _layout(worker):
        _set_rank_state(worker, torch.load(src / "megatron" / f"rank{worker.rank}.pt", weights_only=False))
    else:
        load_hf_weights(worker.model.module, src, worker.spec)
        if worker.rank == 0:
            warnings.warn(
                f"checkpoint {src} was written by trainer layout {written_by}, this trainer is {_layout(worker)}: "
                "weights restored from its HF export; optimizer and RNG state start afresh",
                stacklevel=2,
            )
    return int(state["step"])


def _layout(worker) -> dict:
    layout = worker.layout
    return {"tp": layout.tp_size, "pp": layout.pp_size, "dp": layout.dp_size}


def _rank_state(worker) -> dict:
    from megatron.core import tensor_parallel

    return {
        "model": worker.model.module.state_dict(),
        "optimizers": [
            {"state": inner.state_dict(), "params": [p.detach().clone() for p in _params(inner)]}
            for inner in inner_optimizers(worker.optimizer)
        ],
        "rng": rng_state(),
        "rng_streams": tensor_parallel.get_cuda_rng_tracker().get_states(),
    }


def _set_rank_state(worker, state: dict) -> None:
    from megatron.core import tensor_parallel

    worker.model.module.load_state_dict(state["model"])
    inners = inner_optimizers(worker.optimizer)
    for inner, saved in zip(inners, state["optimizers"], strict=True):
        inner.load_state_dict(saved["state"])
        # The optimizer steps on its own fp32 main copies (views of the model's weights in
        # fp32 training, separate tensors in bf16): restore them too.
        with torch.no_grad():
            for param, value in zip(_params(inner), saved["params"], strict=True):
                param.copy_(value)
    set_rng_state(state["rng"])
    tensor_parallel.get_cuda_rng_tracker().set_states(state["rng_streams"])


def _params(inner: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [param for group in inner.param_groups for param in group["params"]]
