"""Demonstrations recorded through a black-box agent: the program, run for real in the task's
sandbox, talks to an endpoint that answers each of its requests with the next scripted reply.
The last request it sends, plus the last reply, is the conversation exactly as the program
builds it (its system prompt, tool schemas, tool results): what a warm start imitates before RL
samples the same program's episodes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from loongsage.agentflow.agents.base import AgentResult, AgentTask, Endpoint
from loongsage.agentflow.router import anthropic_api, openai_api, responses_api
from loongsage.agentflow.router.messages import ChatRequest, ToolCall, TurnResult
from loongsage.agentflow.router.responses_api import ResponseHistory
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
    """An endpoint that answers request i with `replies[i]`, in whichever API the program calls
    (Chat Completions, Anthropic Messages, Responses; streamed or not, as asked), and keeps every
    request as the router reads it (`requests`: ChatRequests, the Responses ones threaded onto the
    conversation they continue); one past the script is a 400."""

    def __init__(self, replies: list[TurnResult], model: str):
        self.replies, self.model = replies, model
        self.requests: list[ChatRequest] = []
        self.history = ResponseHistory()
        app = FastAPI()

        @app.post("/v1/chat/completions")
        async def chat_completions(request: Request):
            _, chat = openai_api.parse_chat_completion(await request.json(), (self.model,))
            return self._answer(
                chat,
                lambda answer: openai_api.completion_stream([answer], self.model, chat.include_usage),
                lambda answer: openai_api.completion_json([answer], self.model),
            )

        # Anthropic's clients append /v1/messages to the base URL, which a preset may give with /v1.
        @app.post("/v1/messages")
        @app.post("/v1/v1/messages")
        async def messages(request: Request):
            _, chat = anthropic_api.parse_messages_request(await request.json(), (self.model,))
            return self._answer(
                chat,
                lambda answer: anthropic_api.message_stream(answer, self.model),
                lambda answer: anthropic_api.message_json(answer, self.model),
            )

        @app.post("/v1/responses")
        async def responses(request: Request):
            _, call = responses_api.parse_responses_request(await request.json(), (self.model,))
            threaded = self.history.thread(None, call)
            response_id: list[str] = []

            def kept(answer: TurnResult) -> str:
                response_id.append(self.history.keep(threaded, answer))
                return response_id[0]

            return self._answer(
                threaded.chat,
                lambda answer: responses_api.response_stream(answer, self.model, call, kept(answer)),
                lambda answer: responses_api.response_json(answer, self.model, call, kept(answer)),
                stream=call.chat.stream,
            )

        self._server = AppServer(app, name="demonstration-replay")
        self.base_url = self._server.start() + "/v1"

    def _answer(self, chat: ChatRequest, streamed, whole, stream: bool | None = None):
        self.requests.append(chat)
        index = len(self.requests) - 1
        if index >= len(self.replies):
            message = f"the demonstration has {len(self.replies)} replies; request {index + 1} asks for one more"
            return JSONResponse({"error": {"message": message, "type": "invalid_request_error"}}, status_code=400)
        answer = self.replies[index]
        if chat.stream if stream is None else stream:
            return Response("".join(streamed(answer)), media_type="text/event-stream")
        return whole(answer)

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
    with `replies`: the program run for real against a ReplayEndpoint, its last request (as a
    Chat Completions body, whichever API it came in) plus the last reply. A replay that did not
    take every reply fails, naming the task and the program's last words."""
    with ReplayEndpoint(replies, model) as replay:
        result = run(task, Endpoint(replay.base_url, "demonstration", model))
    if result.exit_status != "exited" or len(replay.requests) != len(replies):
        raise ValueError(
            f"agent {agent}: demonstration {task.instance_id!r} did not replay: {result.exit_status}, "
            f"{len(replay.requests)} of {len(replies)} requests ({result.error}); its output ends: {result.log[0][-600:]!r}"
        )
    body = openai_api.chat_body(replay.requests[-1])
    # The assistant turns as the model gave them, not as the program echoes them back (Claude Code
    # adds its schema's defaults to calls): a rollout of the same calls trains on the former.
    turns = [index for index, message in enumerate(body["messages"]) if message["role"] == "assistant"]
    if len(turns) != len(replies) - 1:
        raise ValueError(
            f"agent {agent}: demonstration {task.instance_id!r}: the program's last request holds {len(turns)} assistant "
            f"turns, not the {len(replies) - 1} it was given (it rewrote its history)"
        )
    messages = list(body["messages"])
    for index, given in zip(turns, replies):
        messages[index] = openai_api.message_json(given)
    return {**body, "messages": [*messages, openai_api.message_json(replies[-1])]}


def gold_edits(agent: str, calls: list[dict]) -> Iterator[tuple[str, str, str]]:
    """(path, old, new) of each str_replace of a task's gold calls (str_replace per change, then
    submit); what follows `submit` is left out."""
    for number, call in enumerate(calls):
        name, arguments = call["name"], call.get("arguments", {})
        if name == "submit":
            return
        if name != "str_replace":
            raise ValueError(f"agent {agent}: demonstration call {number} is {name!r}; only str_replace and submit translate")
        yield arguments["path"], arguments["old_str"], arguments["new_str"]


def read_then_edit_calls(
    agent: str, calls: list[dict], workdir: str, read: Callable[[str], dict], edit: Callable[[str, str, str], dict]
) -> list[tuple[str, dict]]:
    """A task's gold calls as a program's own calls, for a program whose edit tool refuses a file
    not read first: `read(path)` before the first `edit(path, old, new)` of each file, as
    {name: arguments}; `submit` is the program's stopping (a reply without a tool call). Paths
    are absolute, under `workdir`."""
    translated, seen = [], set()
    for relative, old, new in gold_edits(agent, calls):
        path = f"{workdir}/{relative}"
        if path not in seen:
            seen.add(path)
            translated.append(read(path))
        translated.append(edit(path, old, new))
    return [(name, args) for step in translated for name, args in step.items()]


# A str_replace as one shell command (for programs whose only tool is a shell): the file rewritten
# in Python, so the old and new text need no shell quoting.
EDIT_COMMAND = """python3 - <<'EOF'
from pathlib import Path
p = Path({path})
p.write_text(p.read_text().replace({old}, {new}, 1))
EOF"""


def edit_commands(agent: str, calls: list[dict]) -> list[str]:
    """A task's gold calls as shell commands, one per edit (paths relative to the working directory)."""
    return [EDIT_COMMAND.format(path=repr(path), old=repr(old), new=repr(new)) for path, old, new in gold_edits(agent, calls)]
