"""Where this process runs: the address that names its machine (for peers in a Ray cluster, and for
servers run in actors), and the GPUs Ray gave it. Light to import: every actor process does."""

from __future__ import annotations

LOOPBACK_HOST = "127.0.0.1"


def this_host() -> str:
    """This process's machine as the Ray cluster's other nodes reach it; loopback without Ray."""
    import ray

    return ray.util.get_node_ip_address() if ray.is_initialized() else LOOPBACK_HOST


def serving_host() -> str:
    """Where a server in a Ray actor (an engine's HTTP API) listens: this node's address once the
    Ray cluster spans machines, so the others reach it; else loopback, exposing nothing."""
    import ray

    if ray.is_initialized() and sum(1 for node in ray.nodes() if node.get("Alive")) > 1:
        return this_host()
    return LOOPBACK_HOST


def ray_gpu_ids() -> list:
    """The GPU ids Ray gave the calling task or actor (ints where Ray reports numbers)."""
    import ray

    return [int(gpu) if str(gpu).isdigit() else gpu for gpu in ray.get_gpu_ids()]
