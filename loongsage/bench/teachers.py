"""The Teacher Manager under a one-teacher budget against every teacher resident.

    python -m loongsage.bench teachers [--model smollm2-135m] [--teachers 1,2,4,8] [--samples 8] [--repeats 3]

Teachers are the model perturbed N ways (saved once under the cache). Each engine slot is the
embedded engine's CLI as a process of its own. For each N, one workload (`--samples` student
samples per teacher, interleaved by teacher) is scored twice in turns:
  - budget: N teachers through one slot (`max_resident=1`), a swap per teacher per call;
  - all resident: N slots, each already holding its teacher.
Memory is the peak resident set (VmHWM) of the teacher side's engine processes: the budget's
against the smallest count's run (the issue's target: within 1.2x of one teacher at 8), and throughput
(samples scored per second) of the budget against all-resident (target: at least 0.8x). VmHWM
also counts the pages of a teacher's files that a swap has mapped, which are page cache the
kernel may drop; the peak of the process's own (anonymous) memory, polled every 5 ms, is
printed beside it.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path

import torch
from safetensors.torch import save_file

from loongsage.bench.repeat import add_repeats_argument, interleaved, pair_ratios, ratio_line, runs_note
from loongsage.inference.client import EngineClient
from loongsage.inference.embedded.weights import read_safetensors
from loongsage.inference.sglang.process import ServerProcess
from loongsage.models import resolve_model_path
from loongsage.models.cache import building, cache_root, is_complete
from loongsage.teachers import ScoreRequest, Teacher, TeacherManager

STARTUP_TIMEOUT_S = 600
PROMPT_TOKENS, RESPONSE_TOKENS = 48, 48


def main(argv: list[str]) -> int:
    args = _parse(argv)
    base = resolve_model_path(args.model)
    teachers = _teachers(base, max(args.teachers))
    print(
        f"model={args.model}; {args.samples} samples of {PROMPT_TOKENS}+{RESPONSE_TOKENS} tokens per teacher; "
        f"{args.repeats} interleaved pairs per teacher count"
    )
    rows = []
    with ExitStack() as stack:
        budget_slot = stack.enter_context(_Slot(base))
        resident = [stack.enter_context(_Slot(base)) for _ in range(max(args.teachers))]
        for count in args.teachers:
            rows.append(_measure(teachers[:count], budget_slot, resident[:count], args.samples, args.repeats))
    base_count, base_peak, base_anon = rows[0][0], rows[0][3], rows[0][5]
    print(
        f"{'teachers':>8s} {'budget s':>9s} {'resident s':>10s} {'budget peak MB':>15s} {'(anonymous)':>12s} "
        f"{'resident peak MB':>17s}"
    )
    for count, budget_s, resident_s, budget_peak, resident_peak, budget_anon in rows:
        print(
            f"{count:8d} {statistics.median(budget_s):9.2f} {statistics.median(resident_s):10.2f} "
            f"{budget_peak / 1e6:15.0f} {budget_anon / 1e6:12.0f} {resident_peak / 1e6:17.0f}  budget {runs_note(budget_s, 2)}"
        )
    for count, budget_s, resident_s, budget_peak, _, budget_anon in rows:
        print(
            f"{count} teachers, one slot: peak memory {budget_peak / base_peak:.2f}x the {base_count}-teacher run's "
            f"(anonymous {budget_anon / base_anon:.2f}x)"
        )
        print(ratio_line(f"{count} teachers: throughput one slot / all resident", pair_ratios(resident_s, budget_s)))
    return 0


def _measure(teachers: list[Teacher], budget_slot: _Slot, resident: list[_Slot], samples: int, repeats: int) -> tuple:
    """(count, budget seconds, all-resident seconds, budget peak bytes, all-resident peak bytes,
    budget peak anonymous bytes)."""
    work = _workload(teachers, samples)
    budget = TeacherManager(teachers, [budget_slot.client])
    everyone = TeacherManager(teachers, [slot.client for slot in resident])
    # Untimed: each teacher into its own slot; the budget's slot through its first swaps (steady
    # state then: one teacher needs none, N teachers one each per call).
    everyone.score(work)
    budget.score(work)
    try:
        budget_s, resident_s = interleaved(lambda _: _timed(budget, work), lambda _: _timed(everyone, work), repeats)
    finally:
        budget.close()
        everyone.close()
    return (
        len(teachers),
        budget_s,
        resident_s,
        budget_slot.peak_rss(),
        sum(slot.peak_rss() for slot in resident),
        budget_slot.peak_anon,
    )


def _timed(manager: TeacherManager, work: list[ScoreRequest]) -> float:
    started = time.perf_counter()
    manager.score(work)
    return time.perf_counter() - started


def _workload(teachers: list[Teacher], per_teacher: int) -> list[ScoreRequest]:
    rng = random.Random(0)
    return [
        ScoreRequest(
            teacher.name,
            [1] + [rng.randrange(2, 4000) for _ in range(PROMPT_TOKENS - 1)],
            [rng.randrange(2, 4000) for _ in range(RESPONSE_TOKENS)],
        )
        for _ in range(per_teacher)
        for teacher in teachers
    ]


def _teachers(base: Path, count: int) -> list[Teacher]:
    """`count` perturbed copies of the model, made once and kept under the cache."""
    teachers = []
    for index in range(count):
        folder = cache_root() / "bench" / f"teachers-{base.name}" / f"teacher-{index}"
        if not is_complete(folder):
            with building(folder) as scratch:
                shutil.copytree(base, scratch, ignore=shutil.ignore_patterns("*.safetensors"), dirs_exist_ok=True)
                generator = torch.Generator().manual_seed(index)
                named = read_safetensors(base)
                weights = {n: (t + 0.01 * t.std() * torch.randn(t.shape, generator=generator)).contiguous() for n, t in named}
                save_file(weights, str(scratch / "model.safetensors"))
        teachers.append(Teacher(f"teacher-{index}", str(folder)))
    return teachers


class _Slot:
    """One engine slot: the embedded engine's CLI as a process of its own."""

    def __init__(self, model_dir: Path):
        self.model_dir = model_dir

    def __enter__(self) -> _Slot:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        self.log_dir = tempfile.TemporaryDirectory(prefix="bench-teachers-")
        argv = [sys.executable, "-m", "loongsage.inference.embedded", "--model-path", str(self.model_dir), "--port", str(port)]
        env = {**os.environ, "OMP_NUM_THREADS": "2"}
        self.server = ServerProcess(argv, env, Path(self.log_dir.name) / "engine.log", "bench teacher slot")
        url = f"http://127.0.0.1:{port}"
        self.server.start(url, STARTUP_TIMEOUT_S)
        self.client = EngineClient(url, timeout=STARTUP_TIMEOUT_S)
        self.peak_anon = 0
        self._done = threading.Event()
        self._poller = threading.Thread(target=self._poll_anon, daemon=True)
        self._poller.start()
        return self

    def _poll_anon(self) -> None:
        """The process's anonymous resident memory (RssAnon), its peak kept, every 5 ms."""
        status = Path(f"/proc/{self.server.pid}/status")
        while not self._done.wait(0.005):
            try:
                line = next(line for line in status.read_text().splitlines() if line.startswith("RssAnon:"))
            except (OSError, StopIteration):
                return
            self.peak_anon = max(self.peak_anon, int(line.split()[1]) * 1024)

    def peak_rss(self) -> int:
        """The process's peak resident set so far (VmHWM), in bytes."""
        for line in Path(f"/proc/{self.server.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError(f"no VmHWM for process {self.server.pid}")

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._poller.join()
        self.client.close()
        self.server.stop()
        self.log_dir.cleanup()


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m loongsage.bench teachers", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m", help="a registered model name or an HF directory")
    parser.add_argument(
        "--teachers",
        type=lambda text: sorted({int(n) for n in text.split(",") if n}),
        default=[1, 2, 4, 8],
        help="teacher counts",
    )
    parser.add_argument("--samples", type=int, default=8, help="samples scored per teacher in each call")
    add_repeats_argument(parser)
    args = parser.parse_args(argv)
    if not args.teachers or args.teachers[0] < 1:
        parser.error("--teachers: counts of at least 1")
    return args
