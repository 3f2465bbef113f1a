"""A teacher's view of the student's samples, through the engine protocol (SGLang's `/generate`
with `max_new_tokens: 0`, `return_logprob`, `logprob_start_len` at the response, and
`top_logprobs_num` for top-k distillation), so a teacher is an embedded engine here and an
SGLang engine on a cluster."""

from __future__ import annotations

from dataclasses import dataclass

from loongsage.inference.client import EngineClient


@dataclass(frozen=True)
class ScoreRequest:
    teacher: str
    prompt_ids: list[int]
    response_ids: list[int]


@dataclass
class TeacherScores:
    """Per response token: the teacher's log-probability of the token the student sampled, and with
    top-k the teacher's k most likely tokens there (ids and log-probabilities, most likely first)."""

    teacher: str
    logprobs: list[float]
    top_ids: list[list[int]] | None = None
    top_logprobs: list[list[float]] | None = None


def score_batch(client: EngineClient, requests: list[ScoreRequest], top_k: int, expected_version: str) -> list[TeacherScores]:
    """One `/generate` call scoring every request (all of one teacher) on `client`; the engine must
    answer under `expected_version` (the teacher's name), or the scores are not that teacher's."""
    for request in requests:
        if not request.prompt_ids or not request.response_ids:
            raise ValueError(f"a scored sample needs a prompt and a response; got {request}")
    extra = {"top_logprobs_num": top_k} if top_k else {}
    answers = client.generate(
        input_ids=[r.prompt_ids + r.response_ids for r in requests],
        sampling_params=[{"max_new_tokens": 0}] * len(requests),
        return_logprob=True,
        logprob_start_len=[len(r.prompt_ids) for r in requests],
        **extra,
    )
    return [_scores(request, answer, top_k, expected_version) for request, answer in zip(requests, answers)]


def _scores(request: ScoreRequest, answer: dict, top_k: int, expected_version: str) -> TeacherScores:
    meta = answer["meta_info"]
    if meta.get("weight_version") != expected_version:
        raise RuntimeError(
            f"teacher {request.teacher!r} was scored by weights {meta.get('weight_version')!r}, "
            f"not {expected_version!r}: the engine slot was swapped under it"
        )
    entries = meta["input_token_logprobs"]
    if len(entries) != len(request.response_ids) or [t for _, t, _ in entries] != request.response_ids:
        raise RuntimeError(f"teacher {request.teacher!r}: the engine scored other tokens than the response")
    scores = TeacherScores(request.teacher, [float(lp) for lp, _, _ in entries])
    if top_k:
        rows = meta["input_top_logprobs"]
        scores.top_ids = [[t for _, t, _ in row] for row in rows]
        scores.top_logprobs = [[float(lp) for lp, _, _ in row] for row in rows]
    return scores
