"""What the Megatron trainer writes into, and reads back from, a checkpoint directory.

Layout (an HF model directory, so the policy is usable as it stands, plus trainer state):
  config.json, tokenizer files, ...   copied from the model the run started from
  model.safetensors                   the policy gathered across tensor/pipeline ranks, HF names
  megatron/                           megatron-core's distributed checkpoint (`torch_dist`) of
                                        model      every weight under its global key and shape
                                        optimizer  Adam's moments (and fp32 main weights when the
                                                   model is not fp32), shaped like the weights
                                        adam_step  Adam's step count
                                        rng        each rank's RNG streams, one object per rank
                                      and, as its content metadata, the layout, optimizer kind
                                      and dtype that wrote it
  trainer_state.json                  trainer step and the layout (tp, pp, dp; ep if > 1) that wrote it
The directory is made atomic by the caller (see loongsage.training.checkpoint_dir).

A resume at the same layout is bit-exact. At another tp, pp or dp the model and the optimizer
are restored and the next step equals the uninterrupted run's to float rounding (reductions
change order); the RNG streams are not: they are per rank (rank r's generators and
tensor-parallel stream mean something else under another layout), so they start as a fresh
run's would, and a warning says so.

Why any layout reads it. A distributed checkpoint stores tensors by global key, not by rank, and
the optimizer is written in megatron's `fully_reshardable` form: the distributed optimizer
(dp > 1) gathers its flat per-rank shards back into weight-shaped tensors keyed
`optimizer.state.<exp_avg|exp_avg_sq|...>.<weight key>`, the keys megatron's plain optimizer
(dp = 1) writes. (Its other formats do not reshard: `dp_reshardable` keeps the flat per-rank
buffers, dp only; `fully_sharded_model_space` needs `ShardedTensor.flattened_range`, which
megatron-core 0.16 no longer supports.) Two differences are evened out here so that either kind
reads what the other wrote, as a change of dp always switches kind (optim.shards_optimizer; and
a change of ep switches between one optimizer and the dense and expert ones megatron chains):
  - main weights: the distributed optimizer calls them `param`, the plain one `fp32_param`;
    written as `fp32_param`. In fp32 training they are the model's weights themselves (the plain
    optimizer steps the weights, the distributed one views of them), so they are not written.
  - the non-tensor state (param groups, where the distributed optimizer keeps Adam's step) is
    laid out differently by the two kinds: across kinds the loading optimizer keeps its own and
    takes the saved step.
The vocabulary is padded alike at every tp dividing 128 (mapping.padded_vocab_size), so the
embedding's global shape does not change with tp either. Two megatron-core 0.16 failures with
torch's Adam (what it uses without TransformerEngine or apex, as on CPU) are worked around
where they occur: see _start_adam_state and _load_optimizer.

What falls back to the HF export with a fresh optimizer and RNG (and says so): a checkpoint
whose `megatron/` is not such a distributed checkpoint (written before this format), and a
change of the model's dtype (fp32 <-> bf16): the main weights exist in one and not the other.

Cost. What resharding costs is the distributed optimizer's gather into weight-shaped tensors
(see OPTIMIZER_FORMAT): SmolLM2-135M at dp=2 on 2 CPU cores saves in 11-18 s, against 5.6 s
when each rank wrote its own shards; at dp=1 there is no gather (4-7 s against 8-9 s), and
loads take 2-4 s. Saving runs megatron's synchronous `torch_dist` writer:
once per process it spawns a helper (a results queue, kept for later saves), and it forks a
writer per file; both work inside the trainer's Ray actors (launch.py runs). On CPU it calls
`torch.cuda.synchronize` (cpu_shims 5.).
"""

from __future__ import annotations

import contextlib
import re
import warnings
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.distributed as dist

from loongsage.training.hf_dir import read_trainer_state, write_hf_dir, write_trainer_state
from loongsage.training.megatron import cpu_shims
from loongsage.training.megatron.convert import host_weights, load_hf_weights
from loongsage.training.megatron.model import gpt_model
from loongsage.training.megatron.optim import inner_optimizers, shards_optimizer
from loongsage.training.rank_process import rng_state, set_rng_state

MEGATRON_DIR = "megatron"
FORMAT = "loongsage megatron trainer checkpoint, dist_checkpointing torch_dist, v1"
# megatron's format for the distributed optimizer that is independent of the layout (see above),
# gathered over gloo to the first data-parallel rank only, which writes it alone anyway (the
# weights' replica ids make it the writer); megatron's other variant all-gathers the whole
# optimizer state into the host memory of every data-parallel rank.
OPTIMIZER_FORMAT = {
    "distrib_optim_sharding_type": "fully_reshardable",
    "distrib_optim_fully_reshardable_mem_efficient": True,
    "chained_optim_avoid_prefix": True,
}
RNG_KEY = "loongsage.rng"
_MAIN_WEIGHTS = re.compile(r"^optimizer\.state\.(param|fp32_param)\.")


def save(out: Path, worker, hf_export: bool = True) -> None:
    """Collective: every rank writes its shards; rank 0 also writes the HF export (`hf_export`:
    not for a critic, whose value head no HF model has)."""
    from megatron.core import dist_checkpointing

    megatron_dir = out / MEGATRON_DIR
    if worker.rank == 0:
        megatron_dir.mkdir(parents=True, exist_ok=True)
    dist.barrier()
    state, _ = _sharded_state(worker, is_loading=False, rng=True)
    with _quiet_internals():
        dist_checkpointing.save(state, str(megatron_dir), content_metadata=_content(worker))
    weights = dict(host_weights(worker.model.module, worker.spec)) if hf_export else {}  # collective; rank 0's
    if worker.rank != 0:
        return
    if hf_export:
        write_hf_dir(out, worker.model_path, weights)
    write_trainer_state(out, {"step": worker.step, "megatron": _layout(worker)})


def load(src: Path, worker, hf_fallback: bool = True) -> int:
    """Restore this rank; return the trainer step the checkpoint was written at. What the
    distributed checkpoint cannot restore falls back to the HF export (`hf_fallback`), or raises."""
    state = read_trainer_state(src)
    written = _written_by(src / MEGATRON_DIR)
    here = _content(worker)
    lost = _not_restorable(written, here)
    if lost and not hf_fallback:
        raise ValueError(f"checkpoint {src}: {lost}")
    if lost:
        load_hf_weights(worker.model.module, src, worker.spec)
        _warn(worker, f"checkpoint {src}: {lost}; weights restored from its HF export; optimizer and RNG state start afresh")
        return int(state["step"])
    same_layout = written["layout"] == here["layout"]
    _load_megatron(src / MEGATRON_DIR, worker, same_kind=written["optimizer"] == here["optimizer"], rng=same_layout)
    if not same_layout:
        _warn(
            worker,
            f"checkpoint {src} was written by trainer layout {written['layout']}, this trainer is {here['layout']}: "
            "model and optimizer restored; the per-rank RNG streams start afresh",
        )
    return int(state["step"])


def _load_megatron(megatron_dir: Path, worker, same_kind: bool, rng: bool) -> None:
    from megatron.core import dist_checkpointing, tensor_parallel

    request, unwritten = _sharded_state(worker, is_loading=True, rng=rng)
    own_optimizer = _skeleton(request["optimizer"])  # before the load applies factories in place
    with _quiet_internals():
        loaded = dist_checkpointing.load(request, str(megatron_dir))
    # As the loading optimizer lays out its state: megatron's own load when the kinds match;
    # across kinds, its tensors as loaded, its non-tensor state as it is, and the saved step.
    if same_kind:
        optimizer_state = loaded["optimizer"]
    else:
        optimizer_state = _tensors_into(own_optimizer, loaded["optimizer"])
        _give_step(optimizer_state, loaded["adam_step"])
    # The load filled the model's weights in place. In fp32 the distributed optimizer's main
    # weights are views of them, which its load overwrites with the placeholders: kept aside.
    _put_back(optimizer_state, unwritten)
    kept = [(param, param.detach().clone()) for param in _main_params(worker.optimizer)] if unwritten else []
    with cpu_shims.cuda_literals_on_cpu():
        _load_optimizer(worker.optimizer, optimizer_state)
    with torch.no_grad():
        for param, value in kept:
            param.copy_(value)
    gpt_model(worker.model).load_state_dict(loaded["model"], strict=True)
    if not same_kind:
        for inner in inner_optimizers(worker.optimizer):
            _set_adam_step(inner, loaded["adam_step"])
    if rng:
        set_rng_state(loaded["rng"]["generators"])
        tensor_parallel.get_cuda_rng_tracker().set_states(loaded["rng"]["streams"])


def _load_optimizer(optimizer, state: dict) -> None:
    """megatron's `load_state_dict`, but for one step of its distributed optimizer: 0.16 copies
    the loaded tensors into every entry of torch Adam's per-parameter state, its `step` included,
    which it does not load there (it takes the step from the param groups): a KeyError. The
    parameter state is loaded here with Adam's steps set aside, then they are put back."""
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

    parts = getattr(optimizer, "chained_optimizers", [optimizer])
    if len(parts) > 1:
        state = [part_state for _, part_state in sorted(state.items())]
    for part, part_state in zip(parts, [state] if len(parts) == 1 else state, strict=True):
        if not isinstance(part, DistributedOptimizer) or "param_state" not in part_state:
            part.load_state_dict(part_state)
            continue
        if part_state.pop("param_state_sharding_type") != OPTIMIZER_FORMAT["distrib_optim_sharding_type"]:
            raise ValueError("the distributed optimizer's state is not in the format this checkpoint writes")
        param_state = part_state.pop("param_state")
        part.load_state_dict(part_state)  # param groups and Adam's step
        steps = {param: entry.pop("step") for param, entry in part.optimizer.state.items() if "step" in entry}
        try:
            part.load_parameter_state_from_fully_reshardable(param_state)
        finally:
            for param, step in steps.items():
                part.optimizer.state[param]["step"] = step


def _main_params(optimizer) -> list[torch.Tensor]:
    return [param for inner in inner_optimizers(optimizer) for group in inner.param_groups for param in group["params"]]


def _give_step(optimizer_state, step: int) -> None:
    """Adam's step into each parameter's state (what torch's Adam loads), across optimizer kinds."""
    if isinstance(optimizer_state, dict) and "exp_avg" in optimizer_state:
        optimizer_state["step"] = torch.tensor(float(step))
    for _, node in _children(optimizer_state):
        _give_step(node, step)


def _sharded_state(worker, is_loading: bool, rng: bool) -> tuple[dict, list]:
    """{model, optimizer, rng, adam_step} as megatron's ShardedTensors / ShardedObjects, and
    the main-weight entries left out in fp32 training (paths in the optimizer's state, data)."""
    from megatron.core import tensor_parallel
    from megatron.core.dist_checkpointing.mapping import ShardedObject

    model_state = gpt_model(worker.model).sharded_state_dict()
    if is_loading:
        for inner in inner_optimizers(worker.optimizer):
            _start_adam_state(inner)
    with cpu_shims.cuda_literals_on_cpu():
        optimizer_state = worker.optimizer.sharded_state_dict(model_state, is_loading=is_loading, metadata=OPTIMIZER_FORMAT)
    unwritten = _even_out_main_weights(optimizer_state, fp32=worker.dtype == torch.float32)
    state = {"model": model_state, "optimizer": optimizer_state, "adam_step": _adam_step(worker.optimizer)}
    if rng:
        layout = worker.layout
        state["rng"] = ShardedObject(
            RNG_KEY,
            {"generators": rng_state(), "streams": tensor_parallel.get_cuda_rng_tracker().get_states()},
            (layout.pp_size, layout.tp_size, layout.dp_size),
            (layout.pp_rank, layout.tp_rank, layout.dp_rank),
            replica_id=0,
        )
    return state, unwritten


def _even_out_main_weights(optimizer_state, fp32: bool) -> list:
    """Main weights under one key for both optimizer kinds; in fp32 taken out (returned). In place."""
    from megatron.core.dist_checkpointing.mapping import ShardedBase

    unwritten = []

    def visit(node, path):
        for key, value in _children(node):
            if key == "param_state" and value is None:
                # The memory-efficient gather leaves the other data-parallel ranks nothing to
                # write; an entry of None would tell megatron's save their states disagree.
                del node[key]
            elif isinstance(value, ShardedBase) and _MAIN_WEIGHTS.match(value.key):
                if fp32:
                    unwritten.append(((*path, key), value.data))
                    del node[key]  # only dicts hold them (megatron's state per parameter)
                else:
                    value.key = _MAIN_WEIGHTS.sub("optimizer.state.fp32_param.", value.key)
            else:
                visit(value, (*path, key))

    visit(optimizer_state, ())
    return unwritten


def _put_back(optimizer_state, unwritten: list) -> None:
    """The main weights left out in fp32, as placeholders of their shape (see _load_megatron)."""
    for path, data in unwritten:
        node = optimizer_state
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = data


class _Loaded:
    """Where a skeleton takes the loaded value."""


def _skeleton(sharded_state):
    """The structure and non-tensor entries of a sharded state, its sharded entries marked."""
    from megatron.core.dist_checkpointing.dict_utils import dict_list_map_outplace
    from megatron.core.dist_checkpointing.mapping import LocalNonpersistentObject, ShardedBase

    def mark(value):
        if isinstance(value, ShardedBase):
            return _Loaded
        return value.unwrap() if isinstance(value, LocalNonpersistentObject) else value

    return dict_list_map_outplace(mark, sharded_state)


def _tensors_into(skeleton, loaded):
    """The skeleton's non-tensor entries, with what was loaded at each marked place."""
    if skeleton is _Loaded:
        return loaded
    if isinstance(skeleton, dict):
        return {key: _tensors_into(value, loaded[key]) if _has_loaded(value) else value for key, value in skeleton.items()}
    if isinstance(skeleton, list):
        return [_tensors_into(value, loaded[i]) if _has_loaded(value) else value for i, value in enumerate(skeleton)]
    return skeleton


def _has_loaded(node) -> bool:
    return node is _Loaded or any(_has_loaded(value) for _, value in _children(node))


def _children(node) -> list:
    """(key, value) of a dict's or a list's entries; none for anything else."""
    if isinstance(node, dict):
        return list(node.items())
    return list(enumerate(node)) if isinstance(node, list) else []


def _adam_step(optimizer) -> int:
    """Adam's step count: torch keeps it per parameter, TransformerEngine's and apex's per group."""
    for inner in inner_optimizers(optimizer):
        for group in inner.param_groups:
            for param in group["params"]:
                if "step" in inner.state.get(param, {}):
                    return int(inner.state[param]["step"])
            if "step" in group:
                return int(group["step"])
    return 0


def _start_adam_state(inner: torch.optim.Optimizer) -> None:
    """Adam's state as torch's Adam makes it at its first step, where it has not stepped yet.
    megatron's distributed optimizer describes its state only once torch's Adam has one (0.16:
    `DistributedOptimizer.state_dict` asserts on the step of torch's Adam, the optimizer
    megatron uses without TransformerEngine or apex); the values are all overwritten by the load."""
    if inner.state or not isinstance(inner, torch.optim.Adam | torch.optim.AdamW):
        return
    for group in inner.param_groups:
        for param in group["params"]:
            step_device = param.device if group.get("fused") or group.get("capturable") else "cpu"
            inner.state[param] = {
                "step": torch.zeros((), dtype=torch.float32, device=step_device),
                "exp_avg": torch.zeros_like(param, memory_format=torch.preserve_format),
                "exp_avg_sq": torch.zeros_like(param, memory_format=torch.preserve_format),
            }


def _set_adam_step(inner: torch.optim.Optimizer, step: int) -> None:
    """Where the optimizer keeps Adam's step (see _adam_step). Across kinds the distributed
    optimizer takes it from its own param groups, which were not loaded."""
    for group in inner.param_groups:
        if "step" in group:
            group["step"] = step
        for param in group["params"]:
            if "step" in inner.state[param]:
                inner.state[param]["step"] = torch.full_like(inner.state[param]["step"], float(step))


def _content(worker) -> dict:
    return {
        "format": FORMAT,
        "layout": _layout(worker),
        "optimizer": _optimizer_kind(worker),
        "dtype": str(worker.dtype).removeprefix("torch."),
    }


def _optimizer_kind(worker) -> str:
    """distributed | plain, and how many optimizers megatron chains: under expert parallelism
    (ep > 1) the experts' parameters get an optimizer of their own beside the dense one; at ep = 1
    they are dense parameters. A change of ep across a checkpoint is thus a change of kind too."""
    kind = "distributed" if shards_optimizer(worker.trainer.megatron) else "plain"
    parts = len(inner_optimizers(worker.optimizer))
    return kind if parts == 1 else f"{kind}, {parts} chained"


def _written_by(megatron_dir: Path) -> dict | None:
    from megatron.core import dist_checkpointing

    if not (megatron_dir / "metadata.json").is_file():
        return None
    return dist_checkpointing.load_content_metadata(str(megatron_dir))


def _not_restorable(written: dict | None, here: dict) -> str | None:
    """Why the megatron checkpoint cannot be restored into this trainer, or None."""
    if written is None or written.get("format") != FORMAT:
        return "no megatron distributed checkpoint of this format in it"
    if written["dtype"] != here["dtype"]:
        return f"written in {written['dtype']}, this trainer trains in {here['dtype']}"
    return None


def _layout(worker) -> dict:
    """The sizes that wrote it; ep only where experts are split (as checkpoints without it were written)."""
    layout = worker.layout
    sizes = {"tp": layout.tp_size, "pp": layout.pp_size, "dp": layout.dp_size}
    return sizes | ({"ep": layout.ep_size} if layout.ep_size > 1 else {})


@contextlib.contextmanager
def _quiet_internals() -> Iterator[None]:
    """megatron's checkpointing calls torch.distributed.checkpoint APIs torch has deprecated
    (ShardedTensor, load_state_dict): news for their developers, not for a user resuming a run."""
    with warnings.catch_warnings():
        for category in (FutureWarning, DeprecationWarning):
            warnings.filterwarnings("ignore", category=category, module=r"(megatron|torch\.distributed\.checkpoint)\.")
        yield


def _warn(worker, message: str) -> None:
    if worker.rank == 0:
        warnings.warn(message, stacklevel=3)
