"""What one sandboxed command may use, what it produced, and the shell prefix that enforces
the per-process limits.

Limits are set with bash's `ulimit` inside the sandbox rather than in a `preexec_fn`:
`preexec_fn` is unsafe in threaded parents (Ray actors are threaded), and under bwrap the
process-count limit must be set after the sandbox's namespaces exist (see bwrap.py).
"""

from __future__ import annotations

from dataclasses import dataclass, fields


class SandboxError(RuntimeError):
    """A sandbox could not be created or used (bad input, missing runtime, escaping path)."""


@dataclass(frozen=True)
class SandboxLimits:
    timeout_s: float = 60.0  # wall clock per exec; the whole process tree is killed when exceeded
    cpu_s: int = 60  # CPU seconds per process (RLIMIT_CPU)
    memory_mb: int = 2048  # address space per process (RLIMIT_AS)
    max_processes: int = 128  # processes/threads the command may have at once
    max_file_mb: int = 64  # largest file it may write (RLIMIT_FSIZE)
    max_output_bytes: int = 1_000_000  # per stream (stdout, stderr); the rest is drained and dropped, `truncated` set
    network: bool = False

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if field.name == "network":
                if not isinstance(value, bool):
                    raise SandboxError(f"SandboxLimits.network must be a bool, got {value!r}")
            elif isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise SandboxError(f"SandboxLimits.{field.name} must be a positive number, got {value!r}")


@dataclass
class ExecResult:
    exit_code: int | None  # None when the sandbox killed it (timeout); 128+N when signal N killed it
    stdout: str  # decoded utf-8 with errors="replace"
    stderr: str
    timed_out: bool
    truncated: bool
    duration_s: float


# The name bash gives $0 in the limits prefix; it shows up in its error messages.
_PREFIX_NAME = "loongsage-sandbox"


def limited_argv(argv: list[str], limits: SandboxLimits, max_processes: int | None) -> list[str]:
    """`argv` run by a bash that first lowers its own limits (soft and hard, so the command
    cannot raise them again) and then execs it. `max_processes` None leaves RLIMIT_NPROC alone
    (where it would count processes outside the sandbox). Core dumps are off: a command
    killed by SIGXCPU/SIGXFSZ would otherwise drop a core file into the tree."""
    settings = ["-c 0", f"-t {int(limits.cpu_s)}", f"-v {int(limits.memory_mb) * 1024}", f"-f {int(limits.max_file_mb) * 1024}"]
    if max_processes is not None:
        settings.append(f"-u {max_processes}")
    # `set +o posix`: in POSIX mode `ulimit -f` counts 512-byte blocks instead of 1024.
    script = f'set +o posix; ulimit {" ".join(settings)} || exit 126; exec "$@"'
    return ["bash", "-c", script, _PREFIX_NAME, *argv]
