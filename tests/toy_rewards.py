"""Rewards with signal for a random-init model, so tiny runs exercise real gradients."""

import os
import re
import time
from pathlib import Path

from loongsage.tasks.registry import completion_reward


@completion_reward
def digit_fraction(response: str, label: str) -> float:
    return sum(ch.isdigit() for ch in response) / max(len(response), 1)


@completion_reward
def explode_on_sevens(response: str, label: str) -> float:
    if "7" in response:
        raise RuntimeError("this reward function cannot handle sevens")
    return 1.0


def _e_fraction(response: str) -> float:
    return response.count("e") / max(len(response), 1)


@completion_reward
def e_fraction(response: str, label: str) -> float:
    """Varies from response to response of a random model, so every group has an advantage."""
    return _e_fraction(response)


@completion_reward
def slow_e_fraction(response: str, label: str) -> float:
    """e_fraction after 0.25 s: a rollout phase long enough to be interrupted on purpose."""
    time.sleep(0.25)
    return _e_fraction(response)


HOLD_ENV = "LOONGSAGE_TEST_HOLD"  # a file: while it exists, held_after_first_16 holds its calls


@completion_reward
def e_fraction_held_after_16(response: str, label: str) -> float:
    """e_fraction; from the 17th call on (step 2 of a run of 16 samples a step) it waits while the
    file $LOONGSAGE_TEST_HOLD exists: the test says when step 2's batch may be ready. Calls are
    counted across the reward workers' processes in a file beside it."""
    hold = Path(os.environ[HOLD_ENV])
    with open(hold.with_name(hold.name + ".calls"), "ab") as calls:
        calls.write(b".")
        count = calls.tell()
    while count > 16 and hold.exists():
        time.sleep(0.05)
    return _e_fraction(response)


@completion_reward
def hang_on_sevens(response: str, label: str) -> float:
    """A reward that never returns for a response with a 7 in it (it sleeps, yielding the interpreter)."""
    while "7" in response:
        time.sleep(1.0)
    return 1.0


@completion_reward
def seize_on_sevens(response: str, label: str) -> float:
    """A reward whose regular expression backtracks for hours on a response with a 7, holding the
    interpreter lock all the while (Python's `re` never lets go of it): its whole process stalls."""
    if "7" in response:
        re.match(r"(a+)+$", "a" * 64 + "!")
    return 1.0
