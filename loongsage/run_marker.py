"""The mark every process of a run carries: an environment variable that the processes it starts
inherit (Ray's, the engines') or are given (a sandbox's, which starts from a clean environment), so
that the next start of the same run dir can find what a run killed outright left running
(controller/run_instance.py)."""

from __future__ import annotations

import os

RUN_MARKER = "LOONGSAGE_RUN_INSTANCE"


def marker_env() -> dict[str, str]:
    """The mark, for a process started with an environment of its own; {} outside a run."""
    value = os.environ.get(RUN_MARKER)
    return {RUN_MARKER: value} if value else {}
