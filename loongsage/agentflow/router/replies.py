"""How a generating route answers: its server-sent events when the client asked for a stream,
else one JSON object; either way with headers saying where each reply was recorded."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from fastapi.responses import JSONResponse, Response

from loongsage.agentflow.router.messages import TurnResult

SSE_HEADERS = {"cache-control": "no-cache"}


def reply(
    trajectory_id: str | None,
    results: Sequence[TurnResult],
    streamed: bool,
    events: Callable[[], Iterable[str]],
    whole: Callable[[], dict],
) -> Response:
    """Only the form sent is built: `events` or `whole`, each a whole reply with ids of its own."""
    headers = _turn_headers(trajectory_id, results)
    if streamed:
        # The engines answer in one piece, so the events go out together once generation is done.
        return Response("".join(events()), media_type="text/event-stream", headers={**SSE_HEADERS, **headers})
    return JSONResponse(whole(), headers=headers)


def _turn_headers(trajectory_id: str | None, results: Sequence[TurnResult]) -> dict[str, str]:
    """Where each reply was recorded, choice by choice (comma-separated when n > 1)."""
    if trajectory_id is None:
        return {}
    return {
        "x-loongsage-branch": ",".join(str(r.branch) for r in results),
        "x-loongsage-turn": ",".join(str(r.turn) for r in results),
    }
