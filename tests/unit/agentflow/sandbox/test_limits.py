from __future__ import annotations

import subprocess

import pytest

from loongsage.agentflow.sandbox import SandboxError, SandboxLimits
from loongsage.agentflow.sandbox.limits import limited_argv


@pytest.mark.parametrize(
    "field, value",
    [
        ("timeout_s", 0),
        ("cpu_s", -1),
        ("memory_mb", "2048"),
        ("max_processes", True),
        ("network", 1),
    ],
)
def test_bad_limit_is_rejected_naming_the_field(field, value):
    with pytest.raises(SandboxError, match=f"SandboxLimits.{field}"):
        SandboxLimits(**{field: value})


def _limits_seen_by(argv: list[str]) -> dict[str, str]:
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    return dict(line.split("=", 1) for line in done.stdout.split())


def test_limited_argv_sets_soft_and_hard_limits_then_runs_the_command():
    limits = SandboxLimits(cpu_s=7, memory_mb=300, max_file_mb=3)
    report = ["bash", "-c", 'for flag in c t v f u; do echo "$flag=$(ulimit -S -$flag)/$(ulimit -H -$flag)"; done']
    seen = _limits_seen_by(limited_argv(report, limits, max_processes=40))
    assert seen == {"c": "0/0", "t": "7/7", "v": "307200/307200", "f": "3072/3072", "u": "40/40"}


def test_limited_argv_leaves_the_process_limit_alone_when_asked():
    report = ["bash", "-c", 'echo "u=$(ulimit -H -u)"']
    before = _limits_seen_by(report)
    assert _limits_seen_by(limited_argv(report, SandboxLimits(), max_processes=None)) == before


def test_limited_argv_passes_arguments_through_unchanged():
    argv = ["printf", "%s|", "a b", "$HOME", "'q'"]
    done = subprocess.run(limited_argv(argv, SandboxLimits(), None), capture_output=True, text=True, check=True)
    assert done.stdout == "a b|$HOME|'q'|"


def test_file_size_limit_counts_kilobytes_even_in_posix_mode(tmp_path):
    argv = limited_argv(["bash", "-c", "head -c 5000000 /dev/zero > big"], SandboxLimits(max_file_mb=1), None)
    subprocess.run(argv, cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "POSIXLY_CORRECT": "1"}, check=False)
    assert (tmp_path / "big").stat().st_size == 1 << 20
