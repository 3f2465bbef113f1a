"""Rank programs for the multi-process megatron tests: real gloo groups, one process per rank."""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

SEQ = 12
ROWS = 2


def run_ranks(program, world_size: int, *args, timeout_s: float = 240) -> None:
    """`program(rank, world_size, store, *args)` in `world_size` spawned processes; a rank's
    exception fails the caller with its traceback, a hang past `timeout_s` kills them all."""
    import tempfile

    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory(prefix="gloo-") as store_dir:
        context = mp.start_processes(
            program, args=(world_size, f"{store_dir}/rendezvous", *args), nprocs=world_size, join=False, start_method="spawn"
        )
        deadline = time.monotonic() + timeout_s
        while not context.join(timeout=1):
            if time.monotonic() > deadline:
                for process in context.processes:
                    process.kill()
                raise TimeoutError(f"{world_size} ranks still running after {timeout_s} s")


def token_ids(vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(0, vocab_size, (ROWS, SEQ), generator=torch.Generator().manual_seed(0))
    return ids, torch.arange(SEQ).expand(ROWS, SEQ)


def _join(rank: int, world_size: int, store: str) -> None:
    import warnings

    import torch.distributed as dist

    # megatron-core's fallback notices (no TransformerEngine, no Apex), once per rank: noise here.
    warnings.filterwarnings("ignore", module=r"(megatron|torch\.distributed\.checkpoint)\.")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world_size)


def _parallel_state(tp: int, pp: int, ep: int = 1) -> None:
    from megatron.core import parallel_state as ps

    from loongsage.training.megatron import cpu_shims
    from loongsage.training.megatron.parallel import add_rng_streams

    cpu_shims.install()
    ps.destroy_model_parallel()
    ps.initialize_model_parallel(tp, pp, expert_model_parallel_size=ep, expert_tensor_parallel_size=1)
    add_rng_streams(1234)


def _loaded(hf_dir: Path):
    from loongsage.training.megatron.convert import load_hf_weights
    from loongsage.training.megatron.mapping import model_spec
    from loongsage.training.megatron.model import build_model

    spec = model_spec(json.loads((hf_dir / "config.json").read_text()))
    model = build_model(spec)
    load_hf_weights(model, hf_dir, spec)
    return model.eval(), spec


def tensor_parallel_program(rank: int, world_size: int, store: str, models: dict[str, str], out: str) -> None:
    """tp=1 (as two data-parallel replicas) for the reference logits, hf_weights and a distributed
    checkpoint of the first model, then tp=2: gathered logits, hf_weights, and that checkpoint loaded at tp=2."""
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    from loongsage.training.megatron.convert import hf_weights
    from loongsage.training.megatron.hf_convert import load_megatron_checkpoint, save_megatron_checkpoint
    from loongsage.training.megatron.model import forward_logits

    _join(rank, world_size, store)
    results: dict = {name: {} for name in models}
    checkpointed = next(iter(models))
    checkpoint_dir = Path(out).parent / "megatron_tp1"

    _parallel_state(tp=1, pp=1)
    for name, hf_dir in models.items():
        model, spec = _loaded(Path(hf_dir))
        with torch.no_grad():
            results[name]["tp1_logits"] = forward_logits(model, *token_ids(spec.vocab_size))
        # Two data-parallel replicas: the second takes no part and yields nothing.
        exported = dict(hf_weights(model, spec))
        if rank == 1 and exported:
            raise AssertionError("hf_weights yielded on a data-parallel replica")
        results[name]["tp1_dp2_weights"] = exported
        if name == checkpointed:
            if rank == 0:
                checkpoint_dir.mkdir()
            dist.barrier()
            save_megatron_checkpoint(model, checkpoint_dir, hf_dir)

    _parallel_state(tp=2, pp=1)
    tp_group = ps.get_tensor_model_parallel_group()
    for name, hf_dir in models.items():
        model, spec = _loaded(Path(hf_dir))
        local, results[name]["tp2_logits"] = _tp_logits(model, spec, tp_group)
        results[name]["tp2_local_vocab"] = local.shape[-1]
        results[name]["tp2_weights"] = dict(hf_weights(model, spec))
        if name == checkpointed:
            from_checkpoint, _ = _loaded(Path(hf_dir))
            for param in from_checkpoint.parameters():
                param.data.zero_()
            load_megatron_checkpoint(from_checkpoint, checkpoint_dir)
            same = all(
                torch.equal(a, b)
                for a, b in zip(model.state_dict().values(), from_checkpoint.state_dict().values())
                if isinstance(a, torch.Tensor)
            )
            agree = torch.tensor([int(same)])
            dist.all_reduce(agree, op=dist.ReduceOp.MIN)
            results[name]["tp2_from_tp1_checkpoint_equal"] = bool(agree.item())
    if rank == 0:
        torch.save(results, out)
    ps.destroy_model_parallel()
    dist.destroy_process_group()


def pipeline_parallel_program(rank: int, world_size: int, store: str, models: dict[str, str], out: str) -> None:
    """pp=2: logits through megatron's pipeline schedule (forward only) and hf_weights."""
    import torch.distributed as dist
    from megatron.core import parallel_state as ps
    from megatron.core.pipeline_parallel import get_forward_backward_func

    from loongsage.training.megatron import cpu_shims
    from loongsage.training.megatron.convert import hf_weights
    from loongsage.training.megatron.model import forward_logits

    _join(rank, world_size, store)
    _parallel_state(tp=1, pp=2)
    results: dict = {name: {} for name in models}
    for name, hf_dir in models.items():
        model, spec = _loaded(Path(hf_dir))
        ids, positions = token_ids(spec.vocab_size)
        last_stage_logits = []

        def forward_step(batches, chunk, ids=ids, positions=positions, kept=last_stage_logits):
            next(batches)
            output = forward_logits(chunk, ids, positions)

            def keep(logits):
                kept.append(logits.detach())
                return logits.sum() * 0, {}

            return output, keep

        with torch.no_grad(), cpu_shims.cuda_literals_on_cpu():
            get_forward_backward_func()(
                forward_step_func=forward_step,
                data_iterator=iter([None]),
                model=[model],
                num_microbatches=1,
                seq_length=ids.shape[1],
                micro_batch_size=ids.shape[0],
                forward_only=True,
            )
        stage_layers = [layer.layer_number - 1 for layer in model.decoder.layers]
        results[name]["stage_layers"] = [None] * world_size
        dist.all_gather_object(results[name]["stage_layers"], stage_layers)
        gathered = [None] * world_size
        dist.all_gather_object(gathered, last_stage_logits[0] if last_stage_logits else None)
        results[name]["pp2_logits"] = gathered[-1]
        results[name]["pp2_weights"] = dict(hf_weights(model, spec))
    if rank == 0:
        torch.save(results, out)
    ps.destroy_model_parallel()
    dist.destroy_process_group()


def expert_parallel_program(rank: int, world_size: int, store: str, models: dict[str, str], out: str) -> None:
    """Two ranks, each MoE model: at ep=1 (two data-parallel replicas) logits and a distributed
    checkpoint; at ep=2 (tp=1, dp=2: each rank holds 2 of the 4 experts) the HF tensors each rank
    read, logits of both ranks' own batches, hf_weights (to rank 0; and to every replica), and
    the ep=1 checkpoint loaded; at tp=2 with ep=2 (the expert group spans the tensor-parallel
    ranks) logits and hf_weights."""
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    from loongsage.models.safetensors_io import SafetensorsReader
    from loongsage.training.megatron.convert import hf_weights
    from loongsage.training.megatron.hf_convert import load_megatron_checkpoint, save_megatron_checkpoint
    from loongsage.training.megatron.model import forward_logits

    _join(rank, world_size, store)
    results: dict = {name: {} for name in models}
    read: list[str] = []
    plain_read = SafetensorsReader.tensor

    def recording_read(reader, name):
        read.append(name)
        return plain_read(reader, name)

    def checkpoint_dir(name: str) -> Path:
        return Path(out).parent / f"{name}_ep1"

    _parallel_state(tp=1, pp=1, ep=1)
    for name, hf_dir in models.items():
        model, spec = _loaded(Path(hf_dir))
        with torch.no_grad():
            results[name]["ep1_logits"] = forward_logits(model, *token_ids(spec.vocab_size))
        if rank == 0:
            checkpoint_dir(name).mkdir()
        dist.barrier()
        save_megatron_checkpoint(model, checkpoint_dir(name), hf_dir)

    _parallel_state(tp=1, pp=1, ep=2)
    SafetensorsReader.tensor = recording_read
    for name, hf_dir in models.items():
        read.clear()
        model, spec = _loaded(Path(hf_dir))
        results[name]["ep2_read"] = sorted(set(read))
        results[name]["ep2_local_experts"] = sorted(n for n, _ in model.named_parameters() if "local_experts" in n)
        ids, positions = token_ids(spec.vocab_size)
        mine = ids.roll(rank, dims=0)  # each data-parallel rank its own batch: tokens really move between ranks
        with torch.no_grad():
            local = forward_logits(model, mine, positions).roll(-rank, dims=0)
        both = [torch.empty_like(local) for _ in range(2)]
        dist.all_gather(both, local)
        results[name]["ep2_logits"] = both
        results[name]["ep2_weights"] = list(hf_weights(model, spec))
        every = [None] * world_size
        dist.all_gather_object(every, sorted(n for n, _ in hf_weights(model, spec, every_replica=True)))
        results[name]["ep2_every_replica_names"] = every
        from_checkpoint, _ = _loaded(Path(hf_dir))
        for param in from_checkpoint.parameters():
            param.data.zero_()
        load_megatron_checkpoint(from_checkpoint, checkpoint_dir(name))
        same = all(torch.equal(a, b) for a, b in zip(model.parameters(), from_checkpoint.parameters(), strict=True))
        agree = torch.tensor([int(same)])
        dist.all_reduce(agree, op=dist.ReduceOp.MIN)
        results[name]["ep2_from_ep1_checkpoint_equal"] = bool(agree.item())
    SafetensorsReader.tensor = plain_read

    _parallel_state(tp=2, pp=1, ep=2)
    tp_group = ps.get_tensor_model_parallel_group()
    for name, hf_dir in models.items():
        model, spec = _loaded(Path(hf_dir))
        results[name]["tp2_ep2_logits"] = _tp_logits(model, spec, tp_group)[1]
        results[name]["tp2_ep2_weights"] = list(hf_weights(model, spec))
    if rank == 0:
        torch.save(results, out)
    ps.destroy_model_parallel()
    dist.destroy_process_group()


def _tp_logits(model, spec, tp_group):
    """(this rank's vocabulary shard of the logits, the logits gathered from both tp ranks)."""
    import torch.distributed as dist

    from loongsage.training.megatron.model import forward_logits

    with torch.no_grad():
        local = forward_logits(model, *token_ids(spec.vocab_size))
    pieces = [torch.empty_like(local) for _ in range(2)]
    dist.all_gather(pieces, local, group=tp_group)
    return local, torch.cat(pieces, dim=-1)
