"""Shared-memory segments of a killed owner: a pool's segments outlive a SIGKILL that takes the
owner's resource tracker with it (ray.kill of an actor, a killed process group), and the next
pool to make a segment unlinks them; a live owner's are kept (its receivers open them by name
while a push is in flight), as are those of other pid namespaces."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from loongsage.transfer import shm_owners
from loongsage.transfer.transports import SegmentPool

pytestmark = pytest.mark.skipif(not Path("/dev/shm").is_dir() or not Path("/proc/self/stat").exists(), reason="Linux only")

# Packs a bucket into a pooled segment and holds it in flight until killed.
OWNER = """
import sys, torch
from loongsage.transfer.transports import pack_shm
with pack_shm([("w", torch.ones(4))]) as payload:
    print(payload["shm_name"], flush=True)
    sys.stdin.read()
"""


def make_a_segment() -> None:
    pool = SegmentPool(keep=0)
    pool.give_back(pool.take(1))  # made (sweeping first), then unlinked at once (keep=0)


def test_a_killed_owners_segments_are_unlinked_by_the_next_pool_and_a_live_owners_kept():
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    name = ""
    try:
        name = owner.stdout.readline().strip()
        segment = Path("/dev/shm", name)
        assert name and segment.exists()
        make_a_segment()
        assert segment.exists(), "a live owner's segment was unlinked in the middle of its push"
        # The owner and its resource tracker (in its process group) together, as ray.kill of an
        # actor or a killpg does: no one is left to unlink the segment.
        os.killpg(owner.pid, signal.SIGKILL)
        owner.wait(timeout=10)
        make_a_segment()
        assert not segment.exists(), "a killed owner's segment outlived the next pool's first segment"
    finally:
        if owner.poll() is None:
            os.killpg(owner.pid, signal.SIGKILL)
            owner.wait(timeout=10)
        if name:
            Path("/dev/shm", name).unlink(missing_ok=True)


def test_an_owner_is_its_pid_with_its_start_time_in_its_pid_namespace():
    namespace, pid = shm_owners._pid_namespace(), os.getpid()
    started = shm_owners._start_time(pid)
    reused = Path("/dev/shm", f"{shm_owners.PREFIX}{namespace}_{pid}_{started + 1}_0")  # our pid, another process
    elsewhere = Path("/dev/shm", f"{shm_owners.PREFIX}{namespace + 1}_{2**22 + 1}_1_0")  # a pid of another namespace
    mine = Path("/dev/shm", shm_owners.new_name())
    try:
        for path in (reused, elsewhere, mine):
            path.write_bytes(b"")
        swept = shm_owners.sweep_orphans()
        assert reused.name in swept and not reused.exists()
        assert elsewhere.exists() and mine.exists()
    finally:
        for path in (reused, elsewhere, mine):
            path.unlink(missing_ok=True)
