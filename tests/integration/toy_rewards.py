"""Rewards with signal for a random-init model, so tiny runs exercise real gradients."""


def digit_fraction(response: str, label: str) -> float:
    return sum(ch.isdigit() for ch in response) / max(len(response), 1)


def explode_on_sevens(response: str, label: str) -> float:
    if "7" in response:
        raise RuntimeError("this reward function cannot handle sevens")
    return 1.0


def e_fraction(response: str, label: str) -> float:
    """Varies from response to response of a random model, so every group has an advantage."""
    return response.count("e") / max(len(response), 1)


def slow_e_fraction(response: str, label: str) -> float:
    """e_fraction after 0.25 s: a rollout phase long enough to be interrupted on purpose."""
    import time

    time.sleep(0.25)
    return e_fraction(response, label)
