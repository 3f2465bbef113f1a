"""Trajectories as training samples and as JSON.

Two shapes:
- per turn: one Sample per engine call, prompt = the turn's prompt ids, response = the sampled
  ids, loss mask all 1;
- concatenated: one Sample per branch when every turn's prompt starts with the previous turn's
  prompt + output (always so inside a branch, checked anyway). prompt = the first turn's
  prompt; response = everything after it. Sampled ids get mask 1 and their logprobs and
  versions; the inserted tool, user and template ids get mask 0, logprob 0.0 and the version
  of the sampled token before them. Carrying the previous version (rather than a sentinel
  such as -1) keeps min/max-version staleness measures right for consumers that do not look
  at the mask; the mask alone says which positions were sampled.
"""

from __future__ import annotations

from dataclasses import asdict

import numpy as np

from loongsage.agentflow.router.trajectory import Branch, Trajectory, Turn
from loongsage.sample import Sample

MODES = ("concat", "per_turn")


def to_samples(trajectory: Trajectory, mode: str = "concat", attempt: str | None = None) -> list[Sample]:
    """Samples of the branches of `attempt` (default: the latest attempt)."""
    if mode not in MODES:
        raise ValueError(f"export mode {mode!r} must be one of {MODES}")
    attempts = trajectory.attempts()
    if not attempts:
        return []
    attempt = attempts[-1] if attempt is None else str(attempt)
    samples: list[Sample] = []
    for branch in trajectory.branches:
        if branch.attempt != attempt:
            continue
        if mode == "concat" and is_concatenable(branch):
            samples.append(concatenated(trajectory.id, branch))
        else:
            samples.extend(per_turn(trajectory.id, branch))
    return samples


def per_turn(trajectory_id: str, branch: Branch) -> list[Sample]:
    return [
        Sample(
            prompt_ids=list(turn.prompt_ids),
            response_ids=list(turn.output_ids),
            response_logprobs=list(turn.output_logprobs),
            loss_mask=[1] * len(turn.output_ids),
            weight_versions=list(turn.weight_versions),
            routed_experts=turn.routed_experts,
            finish_reason=turn.finish_reason,
            response_text=turn.sampled_text,
            metadata=_metadata(trajectory_id, branch, turns=[i]),
        )
        for i, turn in enumerate(branch.turns)
    ]


def is_concatenable(branch: Branch) -> bool:
    turns = branch.turns
    return bool(turns) and all(
        later.prompt_ids[: len(earlier.tip_ids)] == earlier.tip_ids for earlier, later in zip(turns, turns[1:])
    )


def concatenated(trajectory_id: str, branch: Branch) -> Sample:
    first = branch.turns[0]
    response: list[int] = []
    mask: list[int] = []
    logprobs: list[float] = []
    versions: list[int] = []
    covered = len(first.prompt_ids)  # ids of the sequence already placed
    for turn in branch.turns:
        inserted = turn.prompt_ids[covered:]
        previous_version = versions[-1] if versions else (turn.weight_versions[0] if turn.weight_versions else -1)
        response += inserted + turn.output_ids
        mask += [0] * len(inserted) + [1] * len(turn.output_ids)
        logprobs += [0.0] * len(inserted) + list(turn.output_logprobs)
        versions += [previous_version] * len(inserted) + list(turn.weight_versions)
        covered = len(turn.prompt_ids) + len(turn.output_ids)
    return Sample(
        prompt_ids=list(first.prompt_ids),
        response_ids=response,
        response_logprobs=logprobs,
        loss_mask=mask,
        weight_versions=versions,
        routed_experts=concatenated_routing(branch),
        finish_reason=branch.turns[-1].finish_reason,
        response_text="".join(t.sampled_text for t in branch.turns),
        metadata=_metadata(trajectory_id, branch, turns=list(range(len(branch.turns)))),
    )


def concatenated_routing(branch: Branch) -> np.ndarray | None:
    """The branch's routing over its whole sequence: each turn's sampled tokens keep the routing of
    the call that sampled them; the rest (the first prompt, inserted tool and template tokens) the
    last call's, which computed every position but the last. None unless every turn has it."""
    turns = branch.turns
    if any(turn.routed_experts is None for turn in turns):
        return None
    routing = turns[-1].routed_experts.copy()
    for turn in turns[:-1]:
        start, end = len(turn.prompt_ids), len(turn.prompt_ids) + len(turn.output_ids) - 1
        routing[start:end] = turn.routed_experts[start:end]
    return routing


def _metadata(trajectory_id: str, branch: Branch, turns: list[int]) -> dict:
    return {"trajectory_id": trajectory_id, "attempt": branch.attempt, "branch": branch.index, "turns": turns}


def trajectory_json(trajectory: Trajectory) -> dict:
    """What `GET /trajectories/{id}` answers: every branch with its turns, and the concatenated
    sample (ids, mask, logprobs, versions) where the branch has one."""
    return {
        "id": trajectory.id,
        "attempts": trajectory.attempts(),
        "branches": [_branch_json(trajectory.id, b) for b in trajectory.branches],
        "dropped_tools": dict(trajectory.dropped_tools),
    }


def _branch_json(trajectory_id: str, branch: Branch) -> dict:
    sample = concatenated(trajectory_id, branch) if is_concatenable(branch) else None
    return {
        "index": branch.index,
        "attempt": branch.attempt,
        "reason": branch.reason,
        "turns": [_turn_json(t) for t in branch.turns],
        "sample": None
        if sample is None
        else {
            "prompt_ids": sample.prompt_ids,
            "response_ids": sample.response_ids,
            "loss_mask": sample.loss_mask,
            "response_logprobs": sample.response_logprobs,
            "weight_versions": sample.weight_versions,
        },
    }


def _turn_json(turn: Turn) -> dict:
    message = turn.message
    return {
        "prompt_ids": turn.prompt_ids,
        "output_ids": turn.output_ids,
        "output_logprobs": turn.output_logprobs,
        "weight_versions": turn.weight_versions,
        "finish_reason": turn.finish_reason,
        "inherited_prompt_tokens": turn.inherited,
        "prompt_text": turn.prompt_text,
        "sampled_text": turn.sampled_text,
        "message": {
            "role": "assistant",
            "content": message.content,
            "tool_calls": [asdict(c) for c in message.tool_calls],
        },
        "engine": turn.engine,
        "rids": turn.rids,
        "engine_seconds": turn.engine_seconds,
    }
