from __future__ import annotations

import pytest

from loongsage.agentflow.sandbox import SandboxError, SandboxLimits, create_sandbox
from loongsage.agentflow.sandbox.apptainer import apptainer_argv, apptainer_env
from loongsage.agentflow.sandbox.limits import limited_argv


def test_command_contains_the_container_binds_the_tree_and_denies_network():
    inner = limited_argv(["bash", "-c", "pytest -q"], SandboxLimits(), max_processes=None)
    argv = apptainer_argv(
        "/usr/bin/apptainer", "/images/swe.sif", "/tmp/sbx/tree", "/testbed", "/testbed/src", network=False, argv=inner
    )
    assert argv[:2] == ["/usr/bin/apptainer", "exec"]
    options, image_and_command = argv[2 : argv.index("/images/swe.sif")], argv[argv.index("/images/swe.sif") :]
    assert {"--containall", "--cleanenv", "--no-home"} <= set(options)
    assert options[options.index("--bind") + 1] == "/tmp/sbx/tree:/testbed"
    assert options[options.index("--pwd") + 1] == "/testbed/src"
    assert options[options.index("--network") + 1] == "none" and "--net" in options
    assert image_and_command[1:] == inner
    assert "-u" not in " ".join(inner)  # no process limit: it would count the user's other processes


def test_network_allowed_drops_the_network_options():
    argv = apptainer_argv("apptainer", "docker://python:3.11", "/t", "/workspace", "/workspace", network=True, argv=["true"])
    assert "--net" not in argv and "--network" not in argv


def test_tree_path_that_breaks_bind_syntax_is_rejected():
    with pytest.raises(SandboxError, match="contains ':' or ','"):
        apptainer_argv("apptainer", "img.sif", "/tmp/a:b/tree", "/workspace", "/workspace", network=False, argv=["true"])


def test_environment_reaches_the_container_only_through_apptainerenv():
    host = {"PATH": "/usr/bin", "HOME": "/home/u", "APPTAINERENV_LEAK": "1", "SINGULARITYENV_OLD": "1"}
    env = apptainer_env(host, {"LANG": "C.UTF-8", "TOKEN": "a,b=c"})
    assert env == {"PATH": "/usr/bin", "HOME": "/home/u", "APPTAINERENV_LANG": "C.UTF-8", "APPTAINERENV_TOKEN": "a,b=c"}


def test_apptainer_backend_needs_an_image():
    with pytest.raises(SandboxError, match="needs image="):
        create_sandbox({"a.txt": "a"}, backend="apptainer")


def test_missing_apptainer_binary_is_named():
    with pytest.raises(SandboxError, match="'no-such-apptainer' on PATH"):
        create_sandbox({"a.txt": "a"}, backend="apptainer", image="x.sif", apptainer="no-such-apptainer")


@pytest.mark.parametrize("workdir", ["relative", "/", "/a:b"])
def test_bad_workdir_is_rejected(workdir, tmp_path):
    fake = tmp_path / "apptainer"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    with pytest.raises(SandboxError, match="apptainer workdir"):
        create_sandbox({}, backend="apptainer", image="x.sif", apptainer=str(fake), workdir=workdir)
