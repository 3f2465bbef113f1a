"""An engine's three ports (HTTP, NCCL, and the rendezvous of its node ranks), fixed for the
actor's life so that a restarted server answers at the URL its clients hold.

Inside a Slurm job they come from the job's port block (loongsage/cluster/bootstrap.py): any
free port the kernel hands out could sit in another job's Ray worker range on a shared node,
and that job's worker would fail to bind it later. Elsewhere, three ports the kernel says are free.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

from loongsage.cluster.bootstrap import engine_ports as job_engine_ports


def engine_ports(index: int, host: str, environ: Mapping[str, str] | None = None) -> tuple[int, int, int]:
    environ = os.environ if environ is None else environ
    job_id = environ.get("SLURM_JOB_ID")
    if not job_id:
        return free_ports(host, 3)
    ports = job_engine_ports(job_id, index)
    busy = [port for port in ports if not is_free(host, port)]
    if busy:
        raise RuntimeError(
            f"sglang engine {index}: ports {busy} of Slurm job {job_id}'s block are in use on "
            f"{socket.gethostname()} ({host}); is a server of an earlier run of this job still running?"
        )
    return ports


def free_ports(host: str, count: int) -> tuple[int, ...]:
    """`count` distinct ports nothing listens on now (all held open together until chosen)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind((host, 0))
        return tuple(sock.getsockname()[1] for sock in sockets)
    finally:
        for sock in sockets:
            sock.close()


def is_free(host: str, port: int) -> bool:
    with socket.socket() as sock:
        # As the server will bind: connections of an earlier server in TIME_WAIT do not count.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True
