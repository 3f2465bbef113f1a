"""Shared fixtures: the tiny model and its tokenizer, and one real local Ray runtime for integration tests."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

from loongsage.cluster.ray_settings import apply_ray_settings
from loongsage.logs import setup_logging

# The time per test folder at the end of a run.
pytest_plugins = ["tests.folder_times"]

# Tests share 2 cores with each other's actors; one thread each keeps them from thrashing.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# The Ray settings of a run (no prestarted workers, actors at the tests' priority) for every Ray
# the tests start, in this process or in a child.
apply_ray_settings()

# Hypothesis fails an example that runs past 200 ms by default; on 2 loaded cores a fast example
# can be descheduled that long. No property test here is about speed.
settings.register_profile("loongsage", deadline=None)
settings.load_profile("loongsage")

# As the entry points do: tests that call the framework in-process see its messages where a
# run prints them (capsys reads the current sys.stdout, which the handlers follow).
setup_logging()


@pytest.fixture(scope="session")
def tiny_model_path() -> str:
    from loongsage.models import resolve_model_path

    return str(resolve_model_path("tiny"))


@pytest.fixture(scope="module")
def tokenizer(tiny_model_path):
    from loongsage.models import load_tokenizer

    return load_tokenizer(tiny_model_path)


@pytest.fixture(scope="session")
def hf_tiny(tiny_model_path):
    """The tiny model as transformers runs it: the reference our own code is checked against."""
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).eval()


@pytest.fixture(scope="session")
def ray_runtime():
    import ray

    if not ray.is_initialized():
        ray.init(address="local", num_cpus=8, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()
    # Actors ray.kill-ed (their resource trackers with them) leave their pools' shared-memory
    # segments; ray.shutdown has waited for every worker to exit, so all of theirs go now.
    from loongsage.transfer.shm_owners import sweep_orphans

    sweep_orphans()


# The groups dealt first, longest first (as measured by --durations on a 2-core machine): the Slurm tests (about
# 9 minutes on one worker), the one real-model launch (6), then the launch modules with the most
# runs. A long group dealt late would keep one worker busy alone at the end.
LONGEST_FIRST = (
    "tests/slurm/",
    "tests/integration/launch/test_validate_fully_async.py",
    "tests/integration/launch/test_stopping.py",
    "tests/integration/launch/test_launch_agentic.py",
    "tests/integration/launch/test_preemption.py",
    "tests/integration/launch/test_trainer_restart.py",
    "tests/integration/bench/test_bench_chaos.py",
    "tests/integration/launch/",
    "tests/integration/training/megatron/",
    "tests/integration/transfer/",
    "tests/integration/inference/sglang/",
)


def pytest_configure(config) -> None:
    # pytest-xdist deals the groups with the most tests first unless told to keep this order.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


# tryfirst: pytest-xdist's own hook reads the xdist_group marks to name each test's group; after
# it, marks added here would name none, and `--dist loadgroup` would deal test by test.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items) -> None:
    """Under pytest-xdist (`-n 2 --dist loadgroup`, the README's test command) each module runs
    on one worker, so that its module- and session-scoped runs (a smoke run, a Ray of fake GPUs)
    happen once, not once per worker; the Slurm tests run one after another on one worker (they
    share one two-node cluster, and two jobs at once would queue behind each other against their
    timeouts). The groups are dealt in LONGEST_FIRST's order, the rest after them as collected."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    for item in items:
        module = item.nodeid.split("::")[0]
        item.add_marker(pytest.mark.xdist_group("slurm" if module.startswith("tests/slurm/") else module))
    items.sort(key=_deal_order)


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: unknown where xdist is not loaded
def pytest_xdist_node_collection_finished(node, ids) -> None:
    """pytest-xdist names a test's group in its node id ("...::test@group"). Where it cannot (pytest
    9.2 keeps node ids elsewhere; setup.cfg pins pytest for this), it deals test by test without a
    word, and a Slurm job or a module's fixtures run on both workers at once: stop instead."""
    if node.config.getvalue("dist") == "loadgroup" and ids and "@" not in ids[0]:
        raise pytest.UsageError(
            f"pytest-xdist's --dist loadgroup cannot group the tests under pytest {pytest.__version__}: "
            "install the versions setup.cfg's [test] extra pins (pip install -e '.[test]')"
        )


def _deal_order(item) -> int:
    """The index of the first LONGEST_FIRST prefix the test's path starts with; after all of them if none."""
    for order, prefix in enumerate(LONGEST_FIRST):
        if item.nodeid.startswith(prefix):
            return order
    return len(LONGEST_FIRST)
