"""How a task of a Slurm job runs inside `cluster.container`: the srun options (pyxis) or the
words in front of the program (apptainer, enroot), and what is wrong with a container config.
Pure: the caller gives the working directory; nothing here runs or reads anything.

Mounts are `host_path:container_path[:flags]`, flags written as pyxis takes them (`ro`,
`ro+rprivate`), and translated for the other runtimes:
- pyxis: `srun --container-image=IMAGE --container-mounts=a:b,c:d --container-workdir=CWD`; the
  image is an enroot URI (`nvcr.io#nvidia/pytorch:25.01-py3`) or a squashfs file. Without the
  workdir the task would start in the image's WORKDIR, away from the run's relative paths.
- apptainer: `apptainer exec --nv --bind a:b[:ro|rw] IMAGE` (a .sif file or a docker:// URI);
  apptainer binds the working directory and starts there by itself.
- enroot: `enroot start --rw --conf slurm/enroot.conf --mount a:b IMAGE`; IMAGE is a container
  made beforehand on every node with `enroot create --name IMAGE file.sqsh` (enroot keeps
  containers on node-local storage) or a squashfs file. enroot starts in the home directory with
  only the image's environment, so the conf file passes the job's variables in and a shell
  enters the working directory.

Whichever the runtime, the image must hold the run's Python environment (or a mount must bring
it) and, for jobs of more than one node, Slurm's client: the controller starts the other nodes'
Ray with srun from inside the container. Mount the repository at the path it has on the host:
the working directory and the enroot conf file are named by that path on both sides.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

RUNTIMES = ("none", "apptainer", "enroot", "pyxis")
ENROOT_CONF = Path(__file__).resolve().parents[2] / "slurm" / "enroot.conf"
APPTAINER_FLAGS = ("ro", "rw")  # the only mount options `apptainer --bind` takes
MOUNT_FORMAT = "host_path:container_path[:flags] (e.g. /lustre/home:/lustre/home or /data:/data:ro)"


@dataclass(frozen=True)
class Mount:
    host: str
    container: str
    flags: str = ""  # pyxis' spelling: options joined by "+"


def container_problems(container) -> list[str]:
    """Every problem of a `cluster.container` config, each naming its key."""
    runtime = container.runtime
    if runtime not in RUNTIMES:
        return [f"cluster.container.runtime={runtime!r} is not one of {', '.join(RUNTIMES)}"]
    if runtime == "none":
        return []
    problems = []
    image = container.image or ""
    if not image.strip():
        problems.append(
            f"cluster.container.image is empty; cluster.container.runtime={runtime} needs the image the job's tasks run in"
        )
    elif runtime == "enroot" and "://" in image:
        problems.append(
            f"cluster.container.image={image!r}: `enroot start` takes a container made with "
            f"`enroot create --name NAME file.sqsh` (on every node) or a squashfs file, not a URI; "
            f"`enroot import {image}` makes the file"
        )
    for index, spec in enumerate(container.mounts):
        key = f"cluster.container.mounts[{index}]={spec!r}"
        mount = _parse_mount(spec)
        if mount is None:
            problems.append(f"{key} is not {MOUNT_FORMAT}")
        elif runtime == "apptainer" and mount.flags not in ("", *APPTAINER_FLAGS):
            problems.append(f"{key}: apptainer's --bind takes only the flags {' or '.join(APPTAINER_FLAGS)}")
    return problems


def check_container(container) -> None:
    problems = container_problems(container)
    if problems:
        raise ValueError("; ".join(problems))


def srun_options(container, workdir: str) -> list[str]:
    """Options for the `srun` that starts a task inside the container (pyxis only)."""
    check_container(container)
    if container.runtime != "pyxis":
        return []
    options = [f"--container-image={container.image}"]
    if container.mounts:
        options.append("--container-mounts=" + ",".join(container.mounts))
    return [*options, f"--container-workdir={workdir}"]


def command_prefix(container, workdir: str) -> list[str]:
    """The words in front of a program's argv that run it inside the container (apptainer, enroot)."""
    check_container(container)
    mounts = [_parse_mount(spec) for spec in container.mounts]
    if container.runtime == "apptainer":
        binds = [word for mount in mounts for word in ("--bind", _joined(mount.host, mount.container, mount.flags))]
        return ["apptainer", "exec", "--nv", *binds, container.image]
    if container.runtime == "enroot":
        # Two fields make enroot bind recursively; with options, the bind must be spelled out.
        specs = [_joined(m.host, m.container, m.flags and "x-create=auto,rbind," + m.flags.replace("+", ",")) for m in mounts]
        return [
            "enroot",
            "start",
            "--rw",
            "--conf",
            str(ENROOT_CONF),
            *[word for spec in specs for word in ("--mount", spec)],
            container.image,
            "bash",
            "-c",
            'cd -- "$0" && exec "$@"',
            workdir,
        ]
    return []


def _parse_mount(spec) -> Mount | None:
    """A mount, or None when the spec is not host:container[:flags] with an absolute container
    path (commas would split pyxis' list, whitespace enroot's fstab line)."""
    if not isinstance(spec, str) or any(ch in spec for ch in ", \t\n"):
        return None
    parts = spec.split(":")
    if len(parts) not in (2, 3) or not parts[0] or not parts[1].startswith("/"):
        return None
    flags = parts[2] if len(parts) == 3 else ""
    if len(parts) == 3 and not all(flags.split("+")):
        return None
    return Mount(parts[0], parts[1], flags)


def _joined(*fields: str) -> str:
    return ":".join(field for field in fields if field)
