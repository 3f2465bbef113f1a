"""Shared-memory segments named after the process that owns them, so that those a killed owner
leaves behind can be found and unlinked.

A segment stays in /dev/shm until someone unlinks it. `SegmentPool` unlinks its own at exit,
and after a crash multiprocessing's resource tracker would, but that tracker is a child process
of the owner and dies with it: ray.kill of an actor and ray.shutdown (Ray kills a worker's
children with it) and a SIGKILL of the owner's process group take both, and nothing unlinks.
Measured: a pooled 1 MiB segment of an actor stays after ray.kill and after ray.shutdown, and
one of a process whose group was killed stays; a SIGKILL of the owner alone is cleaned up by
its tracker. Every run ends with ray.kill of its trainer workers, so every run left its pools.

So a segment's name says which process made it: `loongsage_<pid namespace>_<pid>_<start time>_<n>`
(a pid is reused, a pid with its start time is not). `sweep_orphans` unlinks the segments whose
owner is gone. A live owner's segments are never touched: a receiver opens a segment by name
while its push is in flight, and that only happens while the owner lives. A receiver still
copying out of a segment swept under it keeps its mapping (unlinking removes only the name).

Linux only (/proc and /dev/shm); elsewhere `new_name` is None (the default, random names) and
the sweep finds nothing.
"""

from __future__ import annotations

import itertools
import os

PREFIX = "loongsage_"
SHM_DIR = "/dev/shm"  # where shm_open puts segments on Linux

_counter = itertools.count()


def new_name() -> str | None:
    """A name for a segment this process creates (owned by it), or None where owners cannot be
    told (no /proc). Computed per call: a forked child is an owner of its own."""
    pid = os.getpid()
    namespace, started = _pid_namespace(), _start_time(pid)
    if namespace is None or started is None:
        return None
    return f"{PREFIX}{namespace}_{pid}_{started}_{next(_counter)}"


def sweep_orphans() -> list[str]:
    """Unlink the segments (in this pid namespace) whose owner process is gone; their names.
    Segments of other pid namespaces (containers sharing /dev/shm) are left alone: their pids
    mean nothing here."""
    namespace = _pid_namespace()
    try:
        names = os.listdir(SHM_DIR)
    except OSError:
        return []
    if namespace is None:
        return []
    swept = []
    alive: dict[tuple[int, int], bool] = {}
    for name in names:
        owner = _owner(name, namespace)
        if owner is None:
            continue
        if owner not in alive:
            alive[owner] = _start_time(owner[0]) == owner[1]
        if alive[owner]:
            continue
        try:
            _shm_unlink(name)
        except (FileNotFoundError, PermissionError):  # swept by another process; another user's
            continue
        swept.append(name)
    return swept


def _owner(name: str, namespace: int) -> tuple[int, int] | None:
    """(pid, start time) of the process that made segment `name` in `namespace`; None when the
    name is not one of ours or is of another namespace."""
    if not name.startswith(PREFIX):
        return None
    parts = name[len(PREFIX) :].split("_")
    if len(parts) != 4 or not all(p.isdigit() for p in parts) or int(parts[0]) != namespace:
        return None
    return int(parts[1]), int(parts[2])


def _pid_namespace() -> int | None:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None


def _start_time(pid: int) -> int | None:
    """When process `pid` started (clock ticks since boot), None when there is no such process
    or it has exited (a zombie: nothing of it can use a segment any more)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    # pid (comm) state ppid ... starttime: field 22; comm may hold spaces and parentheses.
    fields = stat[stat.rfind(")") + 2 :].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def _shm_unlink(name: str) -> None:
    from _posixshmem import shm_unlink  # what multiprocessing.shared_memory itself unlinks with

    shm_unlink("/" + name)
