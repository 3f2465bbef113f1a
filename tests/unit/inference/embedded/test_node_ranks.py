"""An engine spanning nodes, on the embedded engine: a further node rank joins node rank 0 at
--dist-init-addr (node rank 0 does not go on until it has), and ends when node rank 0 is gone or
when it is told to stop. Real processes, a real TCP rendezvous."""

from __future__ import annotations

import gc
import signal
import subprocess
import sys
import threading

from loongsage.inference.embedded.node_ranks import host_rendezvous
from loongsage.inference.sglang.ports import free_ports


def further_node_rank(addr: str) -> subprocess.Popen:
    # No model is read on a further node rank: the path need not exist.
    argv = ["--model-path", "/nonexistent", "--nnodes", "2", "--node-rank", "1", "--tp-size", "2", "--dist-init-addr", addr]
    return subprocess.Popen([sys.executable, "-m", "loongsage.inference.embedded", *argv], stderr=subprocess.PIPE, text=True)


def test_node_rank_0_waits_for_the_further_rank_which_ends_when_rank_0_is_gone():
    addr = f"127.0.0.1:{free_ports('127.0.0.1', 1)[0]}"
    joined = threading.Event()
    stores = []

    def host() -> None:
        stores.append(host_rendezvous(addr, 2))
        joined.set()

    threading.Thread(target=host, daemon=True).start()
    assert not joined.wait(1.5)  # nobody has joined yet: node rank 0 must not serve
    follower = further_node_rank(addr)
    try:
        assert joined.wait(60)
        assert follower.poll() is None
        stores.clear()  # node rank 0 ends: its store goes
        gc.collect()
        assert follower.wait(timeout=30) == 1
        assert "node rank 0 at" in follower.stderr.read()
    finally:
        follower.kill()


def test_a_further_node_rank_stops_cleanly_on_sigterm():
    addr = f"127.0.0.1:{free_ports('127.0.0.1', 1)[0]}"
    follower = further_node_rank(addr)
    try:
        store = host_rendezvous(addr, 2)
        follower.send_signal(signal.SIGTERM)
        assert follower.wait(timeout=30) == 0
        del store
    finally:
        follower.kill()
