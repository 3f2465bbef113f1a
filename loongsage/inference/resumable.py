"""Interruptible generation, client side.

Under partial rollouts a weight update pauses the engines, aborts what is in flight, loads the
new weights and lets generation continue. An aborted `/generate` call is sent again with the
tokens generated so far appended to its input, so nothing sampled is thrown away; every token
keeps the version of the weights that produced it. Works the same against SGLang, whose abort
also returns the partial output.
"""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import numpy as np

UNVERSIONED = -1  # an engine whose weight version is not an integer ("default")

# call(input_ids, sampling_params, rid) -> the engine's /generate response
EngineCall = Callable[[list[int], dict, str], Awaitable[dict]]


@dataclass
class Generation:
    """The engine's answer to one request, stitched together across resumed aborts."""

    output_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    finish: dict = field(default_factory=dict)  # SGLang's finish_reason: {"type", "matched"?}
    rids: list[str] = field(default_factory=list)
    cached_tokens: int = 0
    seconds: float = 0.0  # waiting on the engine, all calls together
    text: str = ""  # the engine's decoded text of the last call only (callers that need it decode)
    # Per output token, (token id, logprob) of the most likely tokens there, when the call asked
    # for them (top_logprobs_num); empty otherwise.
    top_logprobs: list[list[tuple[int, float]]] = field(default_factory=list)
    # R3, when the engine returned it: per position of prompt + output but the last, the experts it
    # was routed to, int32 [rows, layers * top_k]. Across resumes a position keeps the routing of the
    # call that first computed it (a resumed call recomputes the earlier output under new weights).
    routed_experts: np.ndarray | None = None

    @property
    def resumes(self) -> int:
        return max(len(self.rids) - 1, 0)


async def generate_resumable(call: EngineCall, prompt_ids: list[int], params: dict, max_new: int, max_resumes: int) -> Generation:
    """`max_new` tokens at most after `prompt_ids`, continued after up to `max_resumes` aborts."""
    done = Generation()
    for _ in range(max_resumes + 1):
        rid = uuid.uuid4().hex
        done.rids.append(rid)
        started = time.perf_counter()
        response = await call(prompt_ids + done.output_ids, {**params, "max_new_tokens": max_new - len(done.output_ids)}, rid)
        done.seconds += time.perf_counter() - started
        meta = response["meta_info"]
        ids = list(response["output_ids"])
        done.output_ids += ids
        done.logprobs += [entry[0] for entry in meta.get("output_token_logprobs", [])[: len(ids)]]
        done.versions += [version_number(meta.get("weight_version"))] * len(ids)
        # SGLang's entries are [logprob, token id, text]; a position without them is null.
        done.top_logprobs += [[(e[1], e[0]) for e in entry or ()] for entry in meta.get("output_top_logprobs", [])[: len(ids)]]
        done.finish = meta.get("finish_reason") or {"type": "stop"}
        if meta.get("routed_experts") is not None:
            done.routed_experts = _stitch_routing(
                done.routed_experts, meta["routed_experts"], len(prompt_ids) + len(done.output_ids) - 1
            )
        done.text = response.get("text", "")
        if len(done.rids) == 1:
            done.cached_tokens = int(meta.get("cached_tokens", 0) or 0)
        if done.finish.get("type") != "abort" or len(done.output_ids) >= max_new:
            break
    return done


def _stitch_routing(kept: np.ndarray | None, encoded: str, rows: int) -> np.ndarray | None:
    """The rows of one call's `routed_experts` (SGLang's base64 of int32 [rows, layers, top_k]) after
    those `kept` from earlier calls."""
    flat = np.frombuffer(base64.b64decode(encoded), dtype=np.int32)
    if rows <= 0:  # a one-token prompt and nothing generated: no position was routed yet
        return kept
    if flat.size % rows:
        raise ValueError(f"routed_experts holds {flat.size} ids, not a whole number of rows for {rows} positions")
    routing = flat.reshape(rows, -1)
    return routing if kept is None else np.concatenate((kept, routing[len(kept) :]))


def version_number(version) -> int:
    try:
        return int(version)
    except (TypeError, ValueError):
        return UNVERSIONED
