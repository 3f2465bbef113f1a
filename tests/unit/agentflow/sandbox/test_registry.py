from __future__ import annotations

import pytest

from loongsage.agentflow.sandbox import SandboxError, create_sandbox


def test_unknown_backend_lists_the_known_ones():
    with pytest.raises(SandboxError, match="unknown sandbox backend 'docker'.*apptainer, bwrap, local"):
        create_sandbox({}, backend="docker")


def not_a_sandbox(snapshot, limits):
    return "a string"


def test_import_path_to_something_that_is_not_a_sandbox_is_rejected():
    with pytest.raises(SandboxError, match="made a str, not a Sandbox"):
        create_sandbox({}, backend=f"{__name__}:not_a_sandbox")


def test_unexpected_option_names_the_backend_and_the_option():
    with pytest.raises(SandboxError, match="'local'.*unexpected keyword argument 'image'"):
        create_sandbox({}, backend="local", image="x.sif")


def test_unimportable_backend_names_the_module():
    with pytest.raises(SandboxError, match="cannot import module 'no_such_pkg.sandboxes'"):
        create_sandbox({}, backend="no_such_pkg.sandboxes:Mine")
