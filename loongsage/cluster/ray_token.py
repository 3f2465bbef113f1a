"""The per-job Ray token: set before `ray` is first imported (Ray reads RAY_AUTH_MODE then)."""

from __future__ import annotations

import os
import secrets


def ensure_ray_token(environ=None) -> bool:
    """Inside a Slurm job with no token chosen yet, choose one for this job's Ray and every
    process it starts (srun passes the environment on). Returns whether one is set."""
    environ = os.environ if environ is None else environ
    if environ.get("SLURM_JOB_ID") and not environ.get("RAY_AUTH_TOKEN"):
        environ["RAY_AUTH_MODE"] = "token"
        environ["RAY_AUTH_TOKEN"] = secrets.token_urlsafe(32)
    return environ.get("RAY_AUTH_MODE") == "token" and bool(environ.get("RAY_AUTH_TOKEN"))
