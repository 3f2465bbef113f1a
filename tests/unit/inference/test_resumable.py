"""A generation resumed after aborts, stitched: tokens, logprobs, versions, and R3's routed experts,
where each position keeps the routing of the call that first computed it."""

from __future__ import annotations

import asyncio
import base64

import numpy as np

from loongsage.inference.resumable import generate_resumable

PROMPT = [11, 12, 13]
WIDTH = 4  # layers * top_k


def _routing(rows: int, fill: int) -> str:
    ids = np.arange(rows * WIDTH, dtype=np.int32).reshape(rows, WIDTH) % 7 + fill
    return base64.b64encode(ids.tobytes()).decode()


def _reply(output_ids: list[int], finish: str, version: str, routed_rows: int, fill: int) -> dict:
    meta = {
        "finish_reason": {"type": finish},
        "weight_version": version,
        "output_token_logprobs": [[-0.5, t, None] for t in output_ids],
        "routed_experts": _routing(routed_rows, fill),
    }
    return {"text": "", "output_ids": output_ids, "meta_info": meta}


def test_routed_experts_keep_each_positions_first_routing_across_a_resume():
    calls = []

    async def call(input_ids, params, rid):
        calls.append(list(input_ids))
        if len(calls) == 1:  # aborted by a weight update after two tokens
            return _reply([5, 6], "abort", "3", len(input_ids) + 2 - 1, fill=0)
        return _reply([7], "stop", "4", len(input_ids) + 1 - 1, fill=100)

    done = asyncio.run(generate_resumable(call, PROMPT, {}, max_new=8, max_resumes=2))
    assert calls == [PROMPT, PROMPT + [5, 6]]
    assert done.output_ids == [5, 6, 7] and done.versions == [3, 3, 4]
    routing = done.routed_experts
    assert routing.shape == (len(PROMPT) + 3 - 1, WIDTH)
    first = np.frombuffer(base64.b64decode(_routing(len(PROMPT) + 1, 0)), dtype=np.int32).reshape(-1, WIDTH)
    second = np.frombuffer(base64.b64decode(_routing(len(PROMPT) + 2, 100)), dtype=np.int32).reshape(-1, WIDTH)
    # Prompt and token 5 were computed by the first call; token 6 (sampled there, never forwarded)
    # was first computed by the resumed call, which also recomputed the rest under new weights.
    np.testing.assert_array_equal(routing[: len(PROMPT) + 1], first)
    np.testing.assert_array_equal(routing[len(PROMPT) + 1 :], second[len(PROMPT) + 1 :])


def test_without_routing_there_is_none():
    async def call(input_ids, params, rid):
        reply = _reply([5], "stop", "1", 1, 0)
        del reply["meta_info"]["routed_experts"]
        return reply

    assert asyncio.run(generate_resumable(call, PROMPT, {}, max_new=4, max_resumes=0)).routed_experts is None
