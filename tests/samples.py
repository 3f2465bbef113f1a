"""Random training samples for trainer tests."""

from __future__ import annotations

import random

from loongsage.sample import Sample

VOCAB = 49152  # SmolLM2's tokenizer, shared by the tiny model


def random_samples(n: int, seed: int = 0, max_response: int = 12, partial_mask: bool = False) -> list[Sample]:
    """Uneven prompt/response lengths (and, with `partial_mask`, loss masks with holes), so
    that padding and loss normalisation matter."""
    rng = random.Random(seed)
    samples = []
    for _ in range(n):
        response = [rng.randrange(VOCAB) for _ in range(rng.randint(2, max_response))]
        samples.append(
            Sample(
                prompt_ids=[rng.randrange(VOCAB) for _ in range(rng.randint(2, 6))],
                response_ids=response,
                response_logprobs=[-11.0] * len(response),
                loss_mask=[int(rng.random() < 0.8) for _ in response] if partial_mask else [],
                advantage=rng.gauss(0.0, 1.0),
            )
        )
    return samples
