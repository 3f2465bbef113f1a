"""Rewards with signal for a random-init model, so tiny runs exercise real gradients."""


def digit_fraction(response: str, label: str) -> float:
    return sum(ch.isdigit() for ch in response) / max(len(response), 1)
