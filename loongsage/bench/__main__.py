"""python -m loongsage.bench <name> [args]: run a benchmark that measures the baseline and
ours in turns (`--repeats` interleaved pairs, see repeat.py) and prints the median ratio and
its range; `async --simulate` is a deterministic model and runs once."""

from __future__ import annotations

import importlib
import sys

from loongsage.logs import setup_logging

BENCHMARKS = {
    "engine": "embedded engine vs transformers generate",
    "train": "trainer vs a plain HF training loop",
    "agentflow": "router overhead per turn vs the engine's /generate (--engines N: N engines vs 1, affinity vs none)",
    "async": "sync vs fully_async on an agentic workload (--simulate: a GPU-cluster model)",
    "transfer": "weight transfer (--simulate: seed route, flat broadcast and our plan vs the link bound, 8-128 hosts)",
    "teachers": "teacher manager: N teachers through one resident slot vs all resident (peak memory, throughput)",
    "routing": "routing replay (R3): the trainer's routing and log-prob mismatch with the engine, without vs with replay",
    "staleness": "off-policy corrections (none, TIS, M2PO, OPSM) under fully_async, max_staleness 1, 2, 4: reward, mismatch",
    "chaos": "faults injected for real (engine, trainer rank, controller kills; reward, sandbox hangs) vs a clean run",
}
# `async` is a keyword, so its module has another name.
MODULES = {"async": "asynchrony"}


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in BENCHMARKS:
        listing = "\n".join(f"  {n:8s} {d}" for n, d in BENCHMARKS.items())
        print(f"usage: python -m loongsage.bench <name> [args]\n{listing}", file=sys.stderr)
        return 2
    return importlib.import_module(f"loongsage.bench.{MODULES.get(argv[0], argv[0])}").main(argv[1:])


if __name__ == "__main__":
    setup_logging(results_on_stdout=True)  # stdout is the benchmark's table and ratio
    sys.exit(main(sys.argv[1:]))
