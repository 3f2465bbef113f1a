"""Weight pushes over this machine's real transports against the copies they cannot avoid.

    python -m loongsage.bench transfer [--model smollm2-135m] [--transports shm,gloo,inline] [--repeats 3]
    python -m loongsage.bench transfer --simulate ...   # route plans, 8-128 nodes x 8 GPUs, vs the link bound (transfer_simulate)

One embedded engine runs as a server process of its own (its CLI, as on a cluster); this process
holds the model's weights as a trainer's rank 0 does and pushes them with `transfer.push_weights`,
the path every run takes (sessions, pipelined buckets, the version on the last bucket, the
engine's staged commit).

The bound: moving the weights into another process's memory through shared memory takes at least
two copies, one into the shared segment and one out of it into the receiver's tensors. The
bench times exactly those two copies of the same tensors in this process, back to back, into
memory already touched (no page faults, no HTTP, no second process), the faster of torch's copy
and memmove each time: `memcpy bound`. With pipelining the two copies of a push run on two cores
at once, so a push can come within the bound's time or under it. Pairs are interleaved (bound,
push, bound, push, ...) so both sides of a pair see the same load from other processes; the
ratio printed is the median pair's.
"""

from __future__ import annotations

import argparse
import ctypes
import itertools
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from loongsage.bench.repeat import add_repeats_argument, interleaved, pair_ratios, ratio_line, runs_note
from loongsage.inference.client import EngineClient
from loongsage.inference.embedded.weights import read_safetensors
from loongsage.inference.sglang.process import ServerProcess
from loongsage.models import resolve_model_path
from loongsage.transfer import push_weights
from loongsage.transfer.channel import TRANSPORTS

CPU_TRANSPORTS = ("shm", "gloo", "inline")
STARTUP_TIMEOUT_S = 600


def main(argv: list[str]) -> int:
    if "--simulate" in argv:
        from loongsage.bench import transfer_simulate

        return transfer_simulate.main([a for a in argv if a != "--simulate"])
    args = _parse(argv)
    named = read_safetensors(resolve_model_path(args.model))
    total = sum(t.numel() * t.element_size() for _, t in named)
    print(f"model={args.model} {total / 1e6:.0f} MB in {len(named)} tensors; {args.repeats} interleaved pairs per transport")
    bound = _TwoCopies(named, total)
    rows = []
    with _Engine(args.model) as url:
        versions = itertools.count(1)
        for name in args.transports:
            pushed: list[int] = []

            def push(_, name=name, pushed=pushed) -> float:
                pushed.append(next(versions))
                return _timed(lambda: push_weights(named, [url], pushed[-1], transport=name))

            bound_s, push_s = interleaved(lambda _: bound.seconds(), push, args.repeats)
            _check_served(url, pushed[-1])
            rows.append((name, bound_s, push_s))
    print(f"{'transport':10s} {'push s':>8s} {'GB/s':>6s} {'bound s':>8s}  runs")
    for name, bound_s, push_s in rows:
        median = statistics.median(push_s)
        print(
            f"{name:10s} {median:8.3f} {total / median / 1e9:6.2f} {statistics.median(bound_s):8.3f}  push {runs_note(push_s, 3)}"
        )
    for name, bound_s, push_s in rows:
        print(ratio_line(f"{name} push / memcpy bound, time", pair_ratios(push_s, bound_s)))
    return 0


class _TwoCopies:
    """Into a shared-memory-sized buffer and out into the receiver's tensors: buffers allocated
    and touched once, up front, so only the copies are timed. Each time both ways this machine
    copies, the faster counts: torch's copy (an OpenMP team, which slows down badly when other
    processes hold the cores) and one memmove per tensor on this thread (what the shm transport
    does)."""

    def __init__(self, named, total: int):
        self.named = named
        self.middle = torch.zeros(total, dtype=torch.uint8)
        self.outs = [torch.zeros_like(t) for _, t in named]

    def seconds(self) -> float:
        return min(self._timed(lambda dst, src: dst.copy_(src)), self._timed(_memmove))

    def _timed(self, copy) -> float:
        started = time.perf_counter()
        offset = 0
        for (_, tensor), out in zip(self.named, self.outs):
            n = tensor.numel() * tensor.element_size()
            copy(self.middle[offset : offset + n], tensor.reshape(-1).view(torch.uint8))
            copy(out.reshape(-1).view(torch.uint8), self.middle[offset : offset + n])
            offset += n
        return time.perf_counter() - started


def _memmove(dst: torch.Tensor, src: torch.Tensor) -> None:
    ctypes.memmove(dst.data_ptr(), src.data_ptr(), dst.numel())


class _Engine:
    """The embedded engine's CLI as a process of its own, stopped on the way out."""

    def __init__(self, model: str):
        self.model = model

    def __enter__(self) -> str:
        port = _free_port()
        self.log_dir = tempfile.TemporaryDirectory(prefix="bench-transfer-")
        argv = [sys.executable, "-m", "loongsage.inference.embedded", "--model-path", str(resolve_model_path(self.model))]
        log_path = Path(self.log_dir.name) / "engine.log"
        self.server = ServerProcess([*argv, "--port", str(port)], os.environ, log_path, "bench engine")
        url = f"http://127.0.0.1:{port}"
        self.server.start(url, STARTUP_TIMEOUT_S)
        return url

    def __exit__(self, *exc) -> None:
        self.server.stop()
        self.log_dir.cleanup()


def _check_served(url: str, version: int) -> None:
    """A push that reported success must have left the engine on the version it sent."""
    served = EngineClient(url).get_weight_version()
    if served != str(version):
        raise RuntimeError(f"the engine serves weight version {served!r} after pushing version {version}")


def _timed(call) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m loongsage.bench transfer", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m", help="a registered model name or an HF directory")
    parser.add_argument(
        "--transports",
        type=lambda text: [t for t in text.split(",") if t],
        default=list(CPU_TRANSPORTS),
        help=f"comma-separated, of {', '.join(CPU_TRANSPORTS)} (needing a GPU: "
        f"{', '.join(sorted(set(TRANSPORTS) - set(CPU_TRANSPORTS)))})",
    )
    add_repeats_argument(parser)
    args = parser.parse_args(argv)
    unknown = [t for t in args.transports if t not in CPU_TRANSPORTS]
    if unknown:
        parser.error(f"--transports: {', '.join(unknown)} cannot run here; choose from {', '.join(CPU_TRANSPORTS)}")
    return args
