"""The `apptainer` backend, for SWE-bench-style images on clusters: the image's system
(read-only), the tree bound at /workspace (or `workdir=`), `--containall` (own pid/ipc namespaces, private
/tmp, no host home, clean environment), and `--net --network none` unless
`limits.network`.

Commands run as the framework's user (that is how clusters run apptainer). The process
limit is therefore not set: RLIMIT_NPROC would count all of the user's processes on the
node. A fork bomb is stopped by the timeout, which kills the container's pid namespace.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from loongsage.agentflow.sandbox.base import Launch, Sandbox, Snapshot
from loongsage.agentflow.sandbox.limits import SandboxError, SandboxLimits, limited_argv


class ApptainerSandbox(Sandbox):
    backend = "apptainer"
    uses_own_uid = False
    hides_other_sandboxes = True
    read_only_system = True

    def __init__(
        self,
        snapshot: Snapshot | None,
        limits: SandboxLimits | None = None,
        *,
        attach: Mapping[str, Any] | None = None,
        image: str | Path | None = None,
        apptainer: str = "apptainer",
        workdir: str = "/workspace",
    ) -> None:
        """`workdir`: where the tree appears; SWE-bench images expect their repo at /testbed."""
        if not image:
            raise SandboxError("the apptainer sandbox backend needs image= (a .sif file or a docker:// reference)")
        binary = shutil.which(apptainer)
        if binary is None:
            raise SandboxError(f"the apptainer sandbox backend needs {apptainer!r} on PATH")
        if not workdir.startswith("/") or workdir.rstrip("/") == "" or any(c in workdir for c in ":,"):
            raise SandboxError(f"apptainer workdir {workdir!r} must be an absolute path, not /, without ':' or ','")
        self.image = str(image)
        self._apptainer = binary
        self._workdir = workdir.rstrip("/")
        super().__init__(snapshot, limits, attach=attach)
        self.denies_network = not self.limits.network

    @property
    def workdir(self) -> str:
        return self._workdir

    def _handle_options(self) -> dict[str, Any]:
        return {"image": self.image, "apptainer": self._apptainer, "workdir": self._workdir}

    def _launch(self, argv: list[str], cwd: str, env: dict[str, str]) -> Launch:
        command = apptainer_argv(
            self._apptainer,
            self.image,
            str(self.root),
            self._workdir,
            cwd,
            self.limits.network,
            limited_argv(argv, self.limits, max_processes=None),
        )
        return Launch(argv=command, env=apptainer_env(os.environ, {"LANG": "C.UTF-8"} | env))


def apptainer_argv(apptainer: str, image: str, tree: str, workdir: str, cwd: str, network: bool, argv: list[str]) -> list[str]:
    if any(char in tree for char in ":,"):
        raise SandboxError(f"apptainer cannot bind the tree {tree!r}: its path contains ':' or ','")
    command = [apptainer, "exec", "--containall", "--cleanenv", "--no-home", "--bind", f"{tree}:{workdir}", "--pwd", cwd]
    if not network:
        command += ["--net", "--network", "none"]
    return [*command, image, *argv]


def apptainer_env(host_env: Mapping[str, str], inside: Mapping[str, str]) -> dict[str, str]:
    """The environment for the apptainer process: the host's (it finds its config and cache
    there; `--cleanenv` keeps it out of the container) without variables aimed at the
    container, plus `inside` as APPTAINERENV_ variables, which `--cleanenv` lets through."""
    env = {key: value for key, value in host_env.items() if not key.startswith(("APPTAINERENV_", "SINGULARITYENV_"))}
    env.update({f"APPTAINERENV_{key}": value for key, value in inside.items()})
    return env
