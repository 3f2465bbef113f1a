"""The one logging setup: status on stdout, problems on stderr with the module's name, one
handler each however often it is called, and still in place after Hydra's job_logging."""

from __future__ import annotations

import logging
import logging.config

import pytest
import yaml

from loongsage.logs import setup_logging
from tests.paths import REPO_ROOT

log = logging.getLogger("loongsage.some.module")


@pytest.fixture(autouse=True)
def _back_to_the_tests_setup():
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    yield
    root.setLevel(level)  # the dictConfig below sets the root logger up as a run's
    for handler in handlers:
        if handler not in root.handlers:
            root.addHandler(handler)
    setup_logging()  # as tests/conftest.py left it


def test_status_goes_to_stdout_and_problems_to_stderr_with_the_module(capsys):
    setup_logging()
    log.info("run dir: %s", "/tmp/run")
    log.warning("the sandbox cannot deny the network")
    captured = capsys.readouterr()
    assert captured.out == "[loongsage] run dir: /tmp/run\n"
    assert captured.err == "[loongsage] WARNING loongsage.some.module: the sandbox cannot deny the network\n"


def test_a_cli_whose_stdout_is_its_result_keeps_status_off_it(capsys):
    setup_logging(results_on_stdout=True)
    log.info("sandbox preflight passed")
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == "[loongsage] sandbox preflight passed\n"


def test_calling_it_again_adds_no_second_copy_of_each_message(capsys):
    setup_logging()
    setup_logging()
    log.info("once")
    log.error("once too")
    captured = capsys.readouterr()
    assert captured.out.count("once") == 1 and captured.err.count("once too") == 1


def test_hydras_job_logging_then_the_setup_prints_each_message_once(capsys):
    config = yaml.safe_load((REPO_ROOT / "recipes/hydra/job_logging/loongsage.yaml").read_text())
    logging.config.dictConfig(config)  # what Hydra does before launch.py's main runs
    setup_logging()
    log.info("status")
    log.warning("problem")
    captured = capsys.readouterr()
    assert captured.out == "[loongsage] status\n"
    assert captured.err == "[loongsage] WARNING loongsage.some.module: problem\n"


def test_other_libraries_info_stays_quiet(capsys):
    setup_logging()
    logging.getLogger("urllib3.connectionpool").info("Starting new HTTPS connection")
    assert capsys.readouterr() == ("", "")
