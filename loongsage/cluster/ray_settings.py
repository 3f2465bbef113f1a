"""Settings of every Ray a run starts, which the raylet reads from its environment: set before
`ray.init` starts one here, or `ray start` on Slurm (srun passes the environment on)."""

from __future__ import annotations

import os

RAY_SETTINGS = {
    # Ray starts its workers at nice 15, below the controller, its router and the sandboxes (nice
    # 0): on a shared CPU the trainer and the engines then get a few percent of a core whenever
    # anything else runs, and step times swing with whatever that is. Every process of a run is
    # part of the same job, so all run at the same priority.
    "RAY_worker_niceness": "0",
    # Ray prestarts a Python worker per CPU it was given when the first driver connects (8 at
    # least here), and more as tasks queue. A run places a few actors, each in a process of its
    # own, so those idle workers only take the CPU that the actors need while they load (about 2
    # CPU-seconds of a 27-second tiny run, measured).
    "RAY_prestart_worker_first_driver": "0",
    "RAY_enable_worker_prestart": "0",
}


def apply_ray_settings(environ=None) -> None:
    """Each setting where the environment does not choose its own."""
    environ = os.environ if environ is None else environ
    for name, value in RAY_SETTINGS.items():
        environ.setdefault(name, value)
