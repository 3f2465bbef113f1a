"""Demonstrations recorded through a black-box agent: the program, run for real in the task's
sandbox, talks to an endpoint that answers each of its requests with the next scripted reply.
The last request it sends, plus the last reply, is the conversation exactly as the program
builds it (its system prompt, tool schemas, tool results): what a warm start imitates before RL
samples the same program's episodes.
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from loongsage.agentflow.agents.base import AgentResult, AgentTask, Endpoint
from loongsage.agentflow.router import openai_api
from loongsage.agentflow.router.messages import ToolCall, TurnResult
from loongsage.http_server import AppServer


def reply(content: str = "", tool_calls: list[ToolCall] | None = None) -> TurnResult:
    """One scripted assistant reply."""
    calls = list(tool_calls or [])
    return TurnResult(
        content=content,
        tool_calls=calls,
        finish_reason="tool_calls" if calls else "stop",
        prompt_tokens=0,
        completion_tokens=0,
        cached_tokens=0,
        token_logprobs=[],
        stop_sequence=None,
        branch=0,
        turn=0,
    )


class ReplayEndpoint:
    """An OpenAI-compatible chat completions endpoint that answers request i with `replies[i]`
    (streamed or not, as asked) and keeps every request body; one past the script is a 400."""

    def __init__(self, replies: list[TurnResult], model: str):
        self.replies, self.model = replies, model
        self.requests: list[dict] = []
        app = FastAPI()

        @app.post("/v1/chat/completions")
        async def chat_completions(request: Request):
            body = await request.json()
            self.requests.append(body)
            index = len(self.requests) - 1
            if index >= len(self.replies):
                message = f"the demonstration has {len(self.replies)} replies; request {index + 1} asks for one more"
                return JSONResponse({"error": {"message": message, "type": "invalid_request_error"}}, status_code=400)
            answer = [self.replies[index]]
            if body.get("stream"):
                include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
                stream = "".join(openai_api.completion_stream(answer, self.model, include_usage))
                return Response(stream, media_type="text/event-stream")
            return openai_api.completion_json(answer, self.model)

        self._server = AppServer(app, name="demonstration-replay")
        self.base_url = self._server.start() + "/v1"

    def close(self) -> None:
        self._server.stop()

    def __enter__(self) -> ReplayEndpoint:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def record_demonstration(
    agent: str, run: Callable[[AgentTask, Endpoint], AgentResult], task: AgentTask, replies: list[TurnResult], model: str
) -> dict:
    """The chat request an episode of `run` (agent `agent`'s) ends with when the model answers
    with `replies`: the program run for real against a ReplayEndpoint, its last request plus the
    last reply. A replay that did not take every reply fails, naming the task and the program's
    last words."""
    with ReplayEndpoint(replies, model) as replay:
        result = run(task, Endpoint(replay.base_url, "demonstration", model))
    if result.exit_status != "exited" or len(replay.requests) != len(replies):
        raise ValueError(
            f"agent {agent}: demonstration {task.instance_id!r} did not replay: {result.exit_status}, "
            f"{len(replay.requests)} of {len(replies)} requests ({result.error}); its output ends: {result.log[0][-600:]!r}"
        )
    last = replay.requests[-1]
    return {"messages": [*last["messages"], openai_api.message_json(replies[-1])], "tools": last["tools"]}
