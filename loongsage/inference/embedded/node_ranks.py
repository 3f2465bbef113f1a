"""SGLang's multi-node launch (--nnodes, --node-rank, --dist-init-addr) in the embedded engine, so
an engine spanning nodes runs its real code path on CPUs: one server process per node, node rank
0 serving HTTP only once every other node rank has joined it at --dist-init-addr, and node ranks
that end when node rank 0 is gone.

The embedded engine has one rank: node rank 0 holds the whole model and does all the work, the
other node ranks hold no weights (/get_server_info reports tp_size 1, the ranks that join a
weight-update group). What is real is the rendezvous: a TCP store that node rank 0 hosts at
--dist-init-addr and every other node rank connects to, as torch.distributed's would.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Collection
from datetime import timedelta

from torch.distributed import TCPStore

log = logging.getLogger("loongsage.inference.embedded")

JOIN_TIMEOUT_S = 3600.0  # node rank 0 waits this long for the others; the engine actor gives up sooner
BEAT_EVERY_S = 1.0


def parse_addr(dist_init_addr: str) -> tuple[str, int]:
    host, _, port = dist_init_addr.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--dist-init-addr={dist_init_addr!r}: host:port of node rank 0")
    return host, int(port)


def host_rendezvous(dist_init_addr: str, nnodes: int) -> TCPStore:
    """Node rank 0: host the store and return once the other nnodes - 1 node ranks have joined.
    Keep the store for the life of the server: node ranks watch it to know node rank 0 lives."""
    host, port = parse_addr(dist_init_addr)
    log.info("node rank 0 of %d: waiting for the other node ranks at %s", nnodes, dist_init_addr)
    store = TCPStore(host, port, nnodes, is_master=True, timeout=timedelta(seconds=JOIN_TIMEOUT_S), wait_for_workers=True)
    log.info("node rank 0 of %d: every node rank joined", nnodes)
    return store


def follow(dist_init_addr: str, nnodes: int, node_rank: int, stop_signals: Collection[signal.Signals]) -> int:
    """Node rank > 0: join node rank 0, then stay until a stop signal (0) or until node rank 0 is
    gone (1, as an SGLang node rank dies with its peers). The signals must be blocked already."""
    host, port = parse_addr(dist_init_addr)
    store = TCPStore(host, port, nnodes, is_master=False, timeout=timedelta(seconds=JOIN_TIMEOUT_S))
    log.info(
        "node rank %d of %d joined node rank 0 at %s; it holds no weights (node rank 0 computes)",
        node_rank,
        nnodes,
        dist_init_addr,
    )
    while True:
        received = signal.sigtimedwait(list(stop_signals), BEAT_EVERY_S)
        if received is not None:
            log.info("%s received; node rank %d stopping", signal.Signals(received.si_signo).name, node_rank)
            return 0
        try:
            store.add(f"beat/{node_rank}", 1)
        except Exception as exc:  # the store's connection: node rank 0 ended
            log.error("node rank 0 at %s is gone (%s); node rank %d exits", dist_init_addr, type(exc).__name__, node_rank)
            return 1
