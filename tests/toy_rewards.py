"""Rewards with signal for a random-init model, so tiny runs exercise real gradients."""

import re
import time

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
