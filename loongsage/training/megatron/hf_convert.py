"""HF model directory <-> Megatron checkpoint, both directions, as a command:

    python -m loongsage.training.megatron.hf_convert hf-to-megatron <hf dir> <out>
    python -m loongsage.training.megatron.hf_convert megatron-to-hf <megatron dir> <out hf dir>

The Megatron side is megatron-core's distributed checkpoint (`dist_checkpointing`, the
`torch_dist` format Megatron-LM writes with `--ckpt-format torch_dist`), laid out as
Megatron-LM's own converters lay out a converted model:

    <out>/latest_checkpointed_iteration.txt   "release"
    <out>/release/                            dist_checkpointing.save({"model": model.sharded_state_dict(), ...})
    <out>/loongsage_convert.json              what wrote it: format, dtype, vocabulary and its padding
    <out>/hf_files/                           the HF directory's other files: config.json, tokenizer, ...

Why this format: a distributed checkpoint stores every tensor under a global key with its global
shape (the layers stacked along a layer axis), not per rank, so a model converted here at
tp=1, pp=1 loads into a GPTModel at any tensor- or pipeline-parallel size
(`load_megatron_checkpoint`; tested at tp=2). The vocabulary is padded to a multiple of 128
(mapping.padded_vocab_size), which keeps the embedding's global shape the same for every tp
that divides 128. It runs on the CPU: saves are synchronous (asynchronous saves call
`torch.cuda.synchronize`, answered by cpu_shims for the synchronous path), and the writer's
helper processes (a spawned results queue, forked writers) start from this module, so it
only runs under `if __name__ == "__main__"` or from a caller that guards its own main module.
`hf_files/config.json` is what megatron-to-hf rebuilds the model from.

Either direction converts tensor by tensor (convert.py beside this file): the megatron model
is the only full copy in memory; HF shards are written at most 2 GiB at a time. The output
directory appears complete or not at all.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

import torch

from loongsage.models import hf_config
from loongsage.models.safetensors_io import SafetensorsReader, write_safetensors

RELEASE = "release"
TRACKER_FILE = "latest_checkpointed_iteration.txt"
METADATA_FILE = "loongsage_convert.json"
HF_FILES = "hf_files"
FORMAT = "megatron-core dist_checkpointing (torch_dist)"
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".index.json", ".msgpack", ".h5")


def hf_to_megatron(hf_dir: str | Path, out: str | Path) -> Path:
    """Write the HF model in `hf_dir` as a Megatron distributed checkpoint in `out`."""
    from loongsage.training.megatron.convert import load_hf_weights

    hf_dir, out = Path(hf_dir), Path(out)
    spec = _hf_spec(hf_dir)
    with SafetensorsReader(hf_dir) as reader:
        dtype = reader.dtype("model.embed_tokens.weight")
    with _atomic_dir(out) as scratch, _single_rank():
        model = _build(spec, dtype)
        load_hf_weights(model, hf_dir, spec)
        save_megatron_checkpoint(model, scratch, hf_dir)
    return out


def megatron_to_hf(megatron_dir: str | Path, out: str | Path) -> Path:
    """Write the Megatron checkpoint in `megatron_dir` (made by hf_to_megatron) as an HF directory."""
    from loongsage.training.megatron.convert import hf_weights
    from loongsage.training.megatron.mapping import model_spec

    megatron_dir, out = Path(megatron_dir), Path(out)
    metadata = read_metadata(megatron_dir)
    spec = model_spec(hf_config(megatron_dir / HF_FILES))
    with _atomic_dir(out) as scratch, _single_rank():
        model = _build(spec, getattr(torch, metadata["dtype"]))
        load_megatron_checkpoint(model, megatron_dir)
        write_safetensors(scratch, hf_weights(model, spec))
        for path in sorted((megatron_dir / HF_FILES).iterdir()):
            shutil.copy2(path, scratch / path.name)
    return out


def save_megatron_checkpoint(model, out: str | Path, hf_dir: str | Path) -> None:
    """Collective over every rank holding the model, at any tp/pp: write it into the existing,
    empty directory `out` in the layout above, with `hf_dir`'s config and tokenizer files."""
    import torch.distributed as dist
    from megatron.core import dist_checkpointing

    from loongsage.training.megatron.model import gpt_model

    out, hf_dir = Path(out), Path(hf_dir)
    gpt = gpt_model(model)
    if dist.get_rank() == 0:
        (out / RELEASE).mkdir()
    dist.barrier()
    dist_checkpointing.save(_checkpoint_state(gpt), str(out / RELEASE))
    if dist.get_rank() != 0:
        return
    (out / TRACKER_FILE).write_text(RELEASE)
    (out / HF_FILES).mkdir()
    for path in _non_weight_files(hf_dir):
        shutil.copy2(path, out / HF_FILES / path.name)
    metadata = dict(
        format=FORMAT,
        megatron_core=_megatron_version(),
        dtype=str(next(gpt.parameters()).dtype).removeprefix("torch."),
        vocab_size=gpt.vocab_size_unpadded,
        padded_vocab_size=gpt.vocab_size,
        source=str(hf_dir.resolve()),
    )
    (out / METADATA_FILE).write_text(json.dumps(metadata, indent=2) + "\n")


def load_megatron_checkpoint(model, megatron_dir: str | Path) -> None:
    """Collective over every rank holding the model: fill this rank's parameters from the
    distributed checkpoint, whatever the tp/pp it was written at."""
    from megatron.core import dist_checkpointing

    from loongsage.training.megatron.model import gpt_model

    megatron_dir = Path(megatron_dir)
    read_metadata(megatron_dir)
    gpt = gpt_model(model)
    state = dist_checkpointing.load(_checkpoint_state(gpt), str(megatron_dir / RELEASE))
    gpt.load_state_dict(state["model"], strict=True)


def read_metadata(megatron_dir: Path) -> dict:
    if not megatron_dir.is_dir():
        raise FileNotFoundError(f"{megatron_dir}: no such directory")
    for required in (METADATA_FILE, RELEASE, f"{HF_FILES}/config.json"):
        if not (megatron_dir / required).exists():
            raise FileNotFoundError(f"{megatron_dir} is not a checkpoint written by `hf-to-megatron`: {required} is missing")
    metadata = json.loads((megatron_dir / METADATA_FILE).read_text())
    if metadata.get("format") != FORMAT:
        raise ValueError(f"{megatron_dir / METADATA_FILE}: format {metadata.get('format')!r}, expected {FORMAT!r}")
    return metadata


def _hf_spec(hf_dir: Path):
    from loongsage.training.megatron.mapping import model_spec

    if not hf_dir.is_dir():
        raise FileNotFoundError(f"{hf_dir}: no such directory")
    if not (hf_dir / "config.json").is_file():
        raise FileNotFoundError(f"{hf_dir} is not a Hugging Face model directory: config.json is missing")
    return model_spec(hf_config(hf_dir))


def _build(spec, dtype: torch.dtype):
    from loongsage.training.megatron.model import build_model

    # Its random initialization is overwritten at once; it should not advance the caller's RNG.
    with torch.random.fork_rng(devices=[]):
        return build_model(spec, dtype=dtype)


def _checkpoint_state(gpt) -> dict:
    # Megatron-LM's top-level keys for a converted ("release") checkpoint.
    return {"model": gpt.sharded_state_dict(), "checkpoint_version": 3.0, "iteration": 0}


def _non_weight_files(hf_dir: Path) -> list[Path]:
    return sorted(p for p in hf_dir.iterdir() if p.is_file() and not p.name.endswith(WEIGHT_SUFFIXES))


def _megatron_version() -> str:
    from importlib.metadata import version

    return version("megatron-core")


@contextlib.contextmanager
def _single_rank() -> Iterator[None]:
    """A 1-rank gloo group and megatron's parallel state (tp = pp = 1), unless the caller has one."""
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    from loongsage.training.megatron import cpu_shims

    cpu_shims.install()
    if dist.is_initialized():
        if dist.get_world_size() != 1 or not ps.model_parallel_is_initialized():
            raise RuntimeError("conversion runs on one rank: the caller's process group has several or no megatron state")
        yield
        return
    with tempfile.TemporaryDirectory(prefix="loongsage-convert-") as store:
        dist.init_process_group("gloo", init_method=f"file://{store}/rendezvous", rank=0, world_size=1)
        try:
            ps.initialize_model_parallel(1, 1)
            yield
        finally:
            ps.destroy_model_parallel()
            dist.destroy_process_group()


@contextlib.contextmanager
def _atomic_dir(out: Path) -> Iterator[Path]:
    """A scratch directory next to `out`, renamed to `out` when the block succeeds."""
    if out.exists():
        raise FileExistsError(f"{out} exists: choose a new output directory")
    scratch = out.parent / f".{out.name}.partial"
    if scratch.exists():  # left by a conversion that was killed
        shutil.rmtree(scratch)
    scratch.mkdir(parents=True)
    try:
        yield scratch
        scratch.rename(out)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loongsage.training.megatron.hf_convert", description=__doc__.split("\n\n")[0]
    )
    commands = parser.add_subparsers(dest="command", required=True)
    to_megatron = commands.add_parser("hf-to-megatron", help="HF model directory -> Megatron distributed checkpoint")
    to_megatron.add_argument("hf_dir", type=Path)
    to_megatron.add_argument("out", type=Path)
    to_hf = commands.add_parser("megatron-to-hf", help="Megatron checkpoint (from hf-to-megatron) -> HF model directory")
    to_hf.add_argument("megatron_dir", type=Path)
    to_hf.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    # megatron-core and torch's checkpoint module warn about fallbacks (no TransformerEngine, no
    # Apex) and their own deprecations: news for their developers, not for a conversion.
    warnings.filterwarnings("ignore", module=r"(megatron|torch\.distributed\.checkpoint)\.")
    try:
        if args.command == "hf-to-megatron":
            written = hf_to_megatron(args.hf_dir, args.out)
        else:
            written = megatron_to_hf(args.megatron_dir, args.out)
    except (FileNotFoundError, FileExistsError, ValueError) as error:
        print(f"convert: {error}", file=sys.stderr)
        return 2
    print(f"wrote {written}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
