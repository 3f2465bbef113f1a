"""The framework's one logging setup: every module logs through `logging.getLogger(__name__)`,
and a process's entry point calls `setup_logging()` once to decide where that goes.

    [loongsage] run dir: /tmp/run                                    INFO, on stdout
    [loongsage] WARNING loongsage.agentflow.sandbox.local: ...       WARNING and above, on stderr

Status messages go to stdout, where the framework's messages have always gone, in the order
they happened with the run's own output; warnings and errors go to stderr with the module that
raised them. A CLI whose stdout is its result (a report, a table) passes `results_on_stdout=True`
so that its status messages go to stderr too and its stdout stays parseable.

The progress lines (`step 3/50 | reward ...`, `warm start 2/8 ...`) are not log records: they
are the run's terminal display, printed to stderr as they are.
"""

from __future__ import annotations

import logging
import sys

LOGGER_NAME = "loongsage"
STATUS_FORMAT = "[loongsage] %(message)s"
# Tests and people grep warnings by this shape (it names the module that raised the warning).
PROBLEM_FORMAT = "[loongsage] %(levelname)s %(name)s: %(message)s"


def setup_logging(*, results_on_stdout: bool = False) -> None:
    """Route the `loongsage` logger's records to the terminal. Idempotent: a second call
    replaces this module's handlers rather than adding more (the last call's choice holds),
    and re-attaches them after something else (Hydra's job_logging) reset the configuration."""
    logger = logging.getLogger(LOGGER_NAME)
    for handler in [h for h in logger.handlers if isinstance(h, _ConsoleHandler)]:
        logger.removeHandler(handler)
    status = _ConsoleHandler("stderr" if results_on_stdout else "stdout", STATUS_FORMAT)
    status.addFilter(lambda record: record.levelno < logging.WARNING)
    problems = _ConsoleHandler("stderr", PROBLEM_FORMAT)
    problems.setLevel(logging.WARNING)
    logger.addHandler(status)
    logger.addHandler(problems)
    if logger.level == logging.NOTSET:  # a level set by the program (or a test) stands
        logger.setLevel(logging.INFO)
    # Records still reach the root logger: nothing of ours puts a handler there (Hydra's
    # job_logging leaves it without one), and pytest's caplog listens there.
    logger.propagate = True
    logger.disabled = False  # a dictConfig with disable_existing_loggers=true may have set it


class _ConsoleHandler(logging.StreamHandler):
    """Writes to whatever sys.stdout / sys.stderr is at the time of the record, not the stream
    of the moment of setup: pytest's capsys and a redirect_stdout replace them later."""

    def __init__(self, stream_name: str, fmt: str):
        logging.Handler.__init__(self)  # not StreamHandler's: it would pin the stream
        self.stream_name = stream_name
        self.setFormatter(logging.Formatter(fmt))

    @property
    def stream(self):
        return getattr(sys, self.stream_name)

    @stream.setter
    def stream(self, value) -> None:  # StreamHandler.setStream: the stream is always the current one
        pass
