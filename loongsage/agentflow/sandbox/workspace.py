"""The host side of a sandbox: a private directory holding the working tree, and, when the
framework runs as root, an unprivileged uid of its own that its commands run as.

Why a uid per sandbox: RLIMIT_NPROC is not enforced for root, and a uid nobody else has
makes the kernel count (and cap) exactly this sandbox's processes, lets one `kill(-1)` from
that uid end all of them, and keeps sandboxes out of each other's trees (mode 0700). The uid
is claimed by creating the directory named after it, so two processes never share one.
"""

from __future__ import annotations

import os
import random
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from loongsage.agentflow.sandbox.limits import SandboxError
from loongsage.agentflow.sandbox.tree_files import check_relative_path

# Far above login uids (and the usual /etc/subuid ranges); below 2**31 for tools that
# store uids signed.
_SANDBOX_UIDS = range(1_000_000_000, 2_000_000_000)


@dataclass(frozen=True)
class Workspace:
    base: Path  # private: tree/, home/, the snapshot's git dir
    tree: Path  # the working tree the command sees
    home: Path  # HOME for backends that have no private /tmp
    uid: int | None  # the unprivileged uid commands run as; None: the framework's own uid


def sandboxes_dir() -> Path:
    """Where this user's sandboxes live: under the temp dir (TMPDIR moves it), traversable
    but not listable by others, so a sandbox uid can reach its own tree and nothing else."""
    parent = Path(tempfile.gettempdir()) / f"loongsage-sandboxes-{os.getuid()}"
    try:
        parent.mkdir(mode=0o711, exist_ok=True)
        info = os.lstat(parent)
    except OSError as exc:
        raise SandboxError(f"cannot create the sandboxes directory {parent}: {exc}") from exc
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
        raise SandboxError(
            f"sandboxes directory {parent} is not a directory owned by uid {os.getuid()} "
            f"and writable only by it; remove it or set TMPDIR elsewhere"
        )
    return parent


def claim_workspace(own_uid: bool) -> Workspace:
    """A fresh workspace; with `own_uid` (and only when running as root) one with a uid of its own."""
    parent = sandboxes_dir()
    if own_uid and os.geteuid() == 0:
        uid, base = claim_uid(parent)
    else:
        uid, base = None, Path(tempfile.mkdtemp(prefix="sbx-", dir=parent))
    tree, home = base / "tree", base / "home"
    tree.mkdir(mode=0o700)
    home.mkdir(mode=0o700)
    return Workspace(base=base, tree=tree, home=home, uid=uid)


def claim_uid(parent: Path) -> tuple[int, Path]:
    """A sandbox uid nobody else uses, claimed by creating `parent/<uid>` (mode 0711)."""
    for _ in range(100):
        uid = random.randrange(_SANDBOX_UIDS.start, _SANDBOX_UIDS.stop)
        base = parent / str(uid)
        try:
            base.mkdir(mode=0o711)
        except FileExistsError:
            continue
        return uid, base
    raise SandboxError(f"no free sandbox uid found under {parent}")


def fill_tree(tree: Path, snapshot: Mapping[str, str] | str | Path) -> None:
    """Write the snapshot into the empty tree. A directory is copied without its `.git`
    (the sandbox makes its own repository, and a task repo's history could hold the fix)."""
    if isinstance(snapshot, Mapping):
        for rel, content in snapshot.items():
            _write_snapshot_file(tree, rel, content)
        return
    source = Path(snapshot)
    if not source.is_dir():
        raise SandboxError(f"snapshot {str(source)!r} is not a directory (nor a mapping of path to content)")
    try:
        shutil.copytree(source, tree, symlinks=True, ignore=shutil.ignore_patterns(".git"), dirs_exist_ok=True)
    except (OSError, shutil.Error) as exc:
        raise SandboxError(f"cannot copy snapshot directory {str(source)!r}: {exc}") from exc


def _write_snapshot_file(tree: Path, rel: str, content: str) -> None:
    parts = check_relative_path(rel)
    if parts[0] == ".git":
        raise SandboxError(f"snapshot path {rel!r}: .git is made by the sandbox")
    if not isinstance(content, str):
        raise SandboxError(f"snapshot path {rel!r}: content must be str, got {type(content).__name__}")
    target = tree.joinpath(*parts)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")
    except OSError as exc:  # e.g. both "a" and "a/b" in the snapshot
        raise SandboxError(f"snapshot path {rel!r}: {exc.strerror}") from exc


def hand_over(workspace: Workspace) -> None:
    """Give the tree and home to the sandbox uid (symlinks themselves, never their targets)."""
    if workspace.uid is None:
        return
    for top in (workspace.tree, workspace.home):
        os.lchown(top, workspace.uid, workspace.uid)
        for dirpath, dirnames, filenames in os.walk(top):
            for name in dirnames + filenames:
                os.lchown(os.path.join(dirpath, name), workspace.uid, workspace.uid)


def kill_sandbox_processes(uid: int) -> None:
    """SIGKILL every process of the sandbox uid, wherever it hides (other sessions, pid
    namespaces): `kill -1` from that uid reaches all its processes and nothing else. One
    call suffices: the kernel blocks forks while it signals."""
    subprocess.run(
        ["bash", "-c", "kill -s KILL -1"],
        user=uid,
        group=uid,
        extra_groups=[],
        cwd="/",
        env={"PATH": os.defpath},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
    )


def release_workspace(workspace: Workspace) -> None:
    """Remove the workspace, whatever modes the sandbox left on its files."""

    def make_removable(function, path, _exc_info) -> None:
        os.chmod(os.path.dirname(path), 0o700)
        if os.path.isdir(path) and not os.path.islink(path):
            os.chmod(path, 0o700)
        function(path)

    if not workspace.base.exists():
        return
    try:
        if sys.version_info >= (3, 12):
            shutil.rmtree(workspace.base, onexc=make_removable)
        else:
            shutil.rmtree(workspace.base, onerror=make_removable)
    except OSError:
        # A process killed a moment ago may have finished one last write: go once more.
        shutil.rmtree(workspace.base, ignore_errors=True)
