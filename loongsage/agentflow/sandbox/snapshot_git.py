"""The snapshot a sandbox was created from, kept in git, and the diff of the tree against it.

Two repositories hold the snapshot commit: `tree/.git`, the agent's own (agents commit,
and mini-swe-agent submits with `git diff`), and a private copy outside the tree that
`diff()` uses with an index of its own. Whatever the agent does to `tree/.git` (commit,
reset, delete it), `diff()` still compares the files on disk with the snapshot.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from loongsage.agentflow.sandbox.limits import SandboxError

_IDENTITY = {"name": "loongsage-sandbox", "email": "sandbox@loongsage.invalid"}
# Never part of a diff unless the snapshot already tracked them: bytecode and test caches
# that running the tests leaves behind.
_DEFAULT_EXCLUDES = "__pycache__/\n*.py[cod]\n.pytest_cache/\n"


def git_env() -> dict[str, str]:
    """An environment where git reads no system or user config and needs no identity."""
    return {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": "/nonexistent",
        "LC_ALL": "C",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_AUTHOR_NAME": _IDENTITY["name"],
        "GIT_AUTHOR_EMAIL": _IDENTITY["email"],
        "GIT_COMMITTER_NAME": _IDENTITY["name"],
        "GIT_COMMITTER_EMAIL": _IDENTITY["email"],
    }


def _git(args: list[str], env: dict[str, str], cwd: Path | None = None) -> str:
    try:
        done = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, check=False)
    except FileNotFoundError:
        raise SandboxError("sandboxes need git on PATH (Debian: apt-get install git)") from None
    if done.returncode != 0:
        message = done.stderr.decode(errors="replace").strip()
        raise SandboxError(f"git {' '.join(args[:2])} failed ({done.returncode}): {message}")
    return done.stdout.decode("utf-8", errors="replace")


class GitSnapshot:
    def __init__(self, private_git_dir: Path, tree: Path, commit: str) -> None:
        self.private_git_dir = private_git_dir
        self.tree = tree
        self.commit = commit

    @classmethod
    def record(cls, tree: Path, private_git_dir: Path) -> GitSnapshot:
        """Commit everything in `tree` (ignored files too: they are part of the snapshot)
        into `tree/.git`, and copy that repository to `private_git_dir`."""
        env = git_env()
        # An empty template: no sample hooks to copy into every sandbox.
        _git(["init", "--quiet", "--template=", "--initial-branch=main", str(tree)], env)
        with open(tree / ".git" / "config", "a", encoding="utf-8") as config:
            # So that the agent's own commits work without an identity in its environment.
            config.write(f"[user]\n\tname = {_IDENTITY['name']}\n\temail = {_IDENTITY['email']}\n")
        _git(["add", "--all", "--force"], env, cwd=tree)
        _git(["commit", "--quiet", "--no-verify", "--allow-empty", "--message", "snapshot"], env, cwd=tree)
        commit = _git(["rev-parse", "HEAD"], env, cwd=tree).strip()
        shutil.copytree(tree / ".git", private_git_dir, symlinks=True)
        private_git_dir.chmod(0o700)
        (private_git_dir / "info").mkdir(exist_ok=True)
        (private_git_dir / "info" / "exclude").write_text(_DEFAULT_EXCLUDES)
        return cls(private_git_dir, tree, commit)

    def diff(self) -> str:
        """Unified diff (git format, a/ b/ prefixes) of the tree against the snapshot, new
        and deleted files included, binary changes as git binary patches."""
        env = git_env() | {
            "GIT_DIR": str(self.private_git_dir),
            "GIT_WORK_TREE": str(self.tree),
            "GIT_INDEX_FILE": str(self.private_git_dir / "index"),
        }
        _git(["add", "--all"], env, cwd=self.tree)
        return _git(
            [
                "diff",
                "--cached",
                "--binary",
                "--no-renames",
                "--no-ext-diff",
                "--no-textconv",
                "--no-color",
                "--src-prefix=a/",
                "--dst-prefix=b/",
                self.commit,
            ],
            env,
            cwd=self.tree,
        )
