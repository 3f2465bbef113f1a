"""The sandbox interface on every backend that runs here: snapshot, exec, files, diff, destroy."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from loongsage.agentflow.sandbox import (
    ExecResult,
    SandboxError,
    SandboxLimits,
    available_backends,
    create_sandbox,
)
from loongsage.agentflow.sandbox.local import LocalSandbox
from tests.integration.agentflow.sandbox.sandbox_support import backend_params

SNAPSHOT = {
    "README.md": "# demo\n",
    "pkg/__init__.py": "",
    "pkg/calc.py": "def add(a, b):\n    return a - b\n",
    "tests/test_calc.py": "from pkg.calc import add\n\ndef test_add():\n    assert add(2, 3) == 5\n",
    "old.txt": "to be deleted\n",
}
# The network stays allowed so that `local` does not warn: these tests are not about it.
LIMITS = SandboxLimits(timeout_s=30, network=True)


@pytest.fixture(params=backend_params())
def backend(request) -> str:
    return request.param


@pytest.fixture
def sandbox(backend):
    with create_sandbox(SNAPSHOT, backend=backend, limits=LIMITS) as sb:
        yield sb


def test_snapshot_is_the_tree_and_its_only_commit(sandbox):
    result = sandbox.exec("cat pkg/calc.py && git status --porcelain && git log --oneline | wc -l && pwd")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == SNAPSHOT["pkg/calc.py"] + "1\n" + sandbox.workdir + "\n"
    assert sorted(
        p.relative_to(sandbox.root).as_posix() for p in sandbox.root.rglob("*") if p.is_file() and ".git" not in p.parts
    ) == sorted(SNAPSHOT)


def test_snapshot_directory_is_copied_without_its_history(backend, tmp_path):
    source = tmp_path / "repo"
    source.mkdir()
    (source / "a.py").write_text("A = 1\n")
    os.symlink("a.py", source / "link.py")
    env = {
        "PATH": os.environ["PATH"],
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_AUTHOR_NAME": "x",
        "GIT_AUTHOR_EMAIL": "x@x",
        "GIT_COMMITTER_NAME": "x",
        "GIT_COMMITTER_EMAIL": "x@x",
    }
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "the gold fix is in here"]):
        subprocess.run(["git", *args], cwd=source, env=env, check=True)
    with create_sandbox(str(source), backend=backend, limits=LIMITS) as sb:
        result = sb.exec("git log --format=%s; readlink link.py; cat link.py")
    assert result.stdout == "snapshot\na.py\nA = 1\n", result.stderr


def test_exec_runs_with_cwd_env_stdin_and_a_clean_environment(sandbox, monkeypatch):
    monkeypatch.setenv("LOONGSAGE_HOST_SECRET", "leaked")
    result = sandbox.exec(
        'pwd; echo "$GREETING"; cat; echo "[${LOONGSAGE_HOST_SECRET:-}]"; echo oops >&2; exit 3',
        cwd="pkg",
        env={"GREETING": "hi there"},
        stdin="from stdin\n",
    )
    assert result == ExecResult(
        exit_code=3,
        stdout=f"{sandbox.workdir}/pkg\nhi there\nfrom stdin\n[]\n",
        stderr="oops\n",
        timed_out=False,
        truncated=False,
        duration_s=result.duration_s,
    )


def test_list_command_is_not_reinterpreted_by_a_shell(sandbox):
    result = sandbox.exec(["printf", "%s|", "a b", "$HOME", "*"])
    assert result.stdout == "a b|$HOME|*|"


def test_framework_python_and_pytest_run_inside(sandbox):
    # On every backend, wherever the framework's Python lives (a pyenv under a root-only home too).
    result = sandbox.exec("python -m pytest -q -p no:cacheprovider tests", env={"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    assert result.exit_code == 1 and "assert -1 == 5" in result.stdout, result.stdout + result.stderr


@pytest.mark.parametrize("cwd", ["/etc", "../..", "missing"])
def test_cwd_outside_the_tree_is_rejected(sandbox, cwd):
    with pytest.raises(SandboxError, match=f"cwd '{cwd}'"):
        sandbox.exec("true", cwd=cwd)


def test_bad_env_and_command_are_rejected(sandbox):
    with pytest.raises(SandboxError, match="env name 'A=B'"):
        sandbox.exec("true", env={"A=B": "x"})
    with pytest.raises(SandboxError, match="non-empty list of strings"):
        sandbox.exec([])


def test_files_written_by_either_side_are_seen_and_editable_by_the_other(sandbox):
    sandbox.write_file("notes/plan.txt", "step 1\n")
    result = sandbox.exec("cat notes/plan.txt && echo 'step 2' >> notes/plan.txt && echo made > notes/made.txt")
    assert result.exit_code == 0, result.stderr
    assert sandbox.read_file("notes/plan.txt") == "step 1\nstep 2\n"
    assert sandbox.read_file("notes/made.txt") == "made\n"


def _apply(patch: str, snapshot: dict[str, str], where) -> None:
    for rel, content in snapshot.items():
        (where / rel).parent.mkdir(parents=True, exist_ok=True)
        (where / rel).write_text(content)
    subprocess.run(["git", "init", "-q"], cwd=where, check=True)
    subprocess.run(["git", "apply", "--binary", "-"], cwd=where, input=patch.encode(), check=True)


def test_diff_has_modified_new_deleted_and_binary_files_and_git_applies_it(sandbox, tmp_path):
    command = (
        "sed -i 's/a - b/a + b/' pkg/calc.py && rm old.txt && mkdir -p data && "
        "printf 'new\\n' > data/new.txt && printf '\\x00\\x01\\x02' > data/blob.bin && "
        "mkdir -p pkg/__pycache__ && echo junk > pkg/__pycache__/calc.cpython-311.pyc"
    )
    assert sandbox.exec(command).exit_code == 0
    patch = sandbox.diff()
    assert "diff --git a/pkg/calc.py b/pkg/calc.py" in patch and "+    return a + b" in patch
    assert "deleted file mode" in patch and "--- a/old.txt" in patch
    assert "new file mode" in patch and "+++ b/data/new.txt" in patch
    assert "GIT binary patch" in patch
    assert "__pycache__" not in patch
    _apply(patch, SNAPSHOT, tmp_path)
    assert (tmp_path / "pkg" / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"
    assert not (tmp_path / "old.txt").exists()
    assert (tmp_path / "data" / "blob.bin").read_bytes() == b"\x00\x01\x02"


def test_diff_is_against_the_snapshot_whatever_the_agent_does_with_git(sandbox):
    result = sandbox.exec("echo change >> README.md && git commit -qam 'agent commit' && git status --porcelain && rm -rf .git")
    assert result.exit_code == 0 and result.stdout == "", result.stderr
    patch = sandbox.diff()
    assert "+change" in patch and patch.count("diff --git") == 1


def test_unchanged_tree_has_an_empty_diff(sandbox):
    assert sandbox.diff() == ""


def test_destroy_removes_the_tree_is_idempotent_and_ends_use(backend):
    sb = create_sandbox(SNAPSHOT, backend=backend, limits=LIMITS)
    root = sb.root
    sb.destroy()
    sb.destroy()
    assert not root.exists() and not root.parent.exists()
    with pytest.raises(SandboxError, match="destroyed"):
        sb.exec("true")
    with pytest.raises(SandboxError, match="destroyed"):
        sb.read_file("README.md")


def test_context_manager_destroys_even_on_error(backend):
    with pytest.raises(RuntimeError, match="agent crashed"):
        with create_sandbox(SNAPSHOT, backend=backend, limits=LIMITS) as sb:
            root = sb.root
            raise RuntimeError("agent crashed")
    assert not root.exists()


def test_creating_a_sandbox_and_running_a_command_takes_well_under_a_second(backend):
    timings = []
    for _ in range(3):
        started = time.monotonic()
        with create_sandbox(SNAPSHOT, backend=backend, limits=LIMITS) as sb:
            assert sb.exec("true").exit_code == 0
        timings.append(time.monotonic() - started)
    assert min(timings) < 1.0, timings


def test_auto_prefers_bwrap_where_it_works():
    with create_sandbox({"a": "a"}, limits=LIMITS) as sb:
        assert sb.backend == ("bwrap" if "bwrap" in available_backends() else "local")


class TaggedSandbox(LocalSandbox):
    """A backend from outside the framework, chosen by import path."""

    def _launch(self, argv, cwd, env):
        return super()._launch(argv, cwd, env | {"TAG": "custom"})


def test_backend_by_import_path():
    with create_sandbox({"a": "a"}, backend=f"{__name__}:TaggedSandbox", limits=LIMITS) as sb:
        assert isinstance(sb, TaggedSandbox)
        assert sb.exec("echo $TAG").stdout == "custom\n"
