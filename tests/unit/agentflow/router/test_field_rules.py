"""docs/agent_fields.md is the router's contract with agent programs: every row's example goes
through the router's parser for its API and must meet the row's rule. Refused: a 400 whose
param names the field. Ignored: accepted, and the request the router builds is the one it
builds without the field. Honored: accepted (what each does is tested with the official SDKs in
tests/integration/agentflow/router)."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from loongsage.agentflow.router import anthropic_api, completions_api, openai_api, responses_api
from loongsage.agentflow.router.errors import RouterError

DOC = Path(__file__).parents[4] / "docs" / "agent_fields.md"
MODELS = ("tiny",)
# Per API section of the doc: the smallest valid body, and the router's parser as
# body -> the requests it builds, stripped of what records rather than samples.
APIS = {
    "Chat Completions": ({"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}, "chat"),
    "Completions": ({"model": "tiny", "prompt": "hi"}, "completions"),
    "Responses": ({"model": "tiny", "input": "hi"}, "responses"),
    "Anthropic Messages": ({"model": "tiny", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}, "messages"),
}
# Fields whose example needs another field beside it.
COMPANIONS = {("Chat Completions", "top_logprobs"): {"logprobs": True}}
ROW = re.compile(r"^\| `(?P<field>[a-z_]+)`(?: \([^)]*\))? \| (?P<rule>honored|ignored|refused) \| `(?P<example>.*)` \| .* \|$")


def _parse(kind: str, body: dict) -> list:
    if kind == "chat":
        requests = [openai_api.parse_chat_completion(body, MODELS)[1]]
    elif kind == "completions":
        requests = completions_api.parse_completion(body, MODELS)[1]
    elif kind == "responses":
        call = responses_api.parse_responses_request(body, MODELS)[1]
        requests = [(call.chat, call.instructions, call.previous_response_id)]
    else:
        requests = [anthropic_api.parse_messages_request(body, MODELS)[1]]
    return [_sampled(request) for request in requests]


def _sampled(request):
    """What decides the prompt and its sampling: a hosted tool dropped is recorded, not sampled."""
    if isinstance(request, tuple):
        return (_sampled(request[0]), *request[1:])
    return replace(request, dropped_tools=())


def _rows() -> list[tuple[str, str, str, object]]:
    rows, api = [], None
    for line in DOC.read_text().splitlines():
        if line.startswith("## "):
            api = next((name for name in APIS if line[3:].startswith(name)), None)
            continue
        match = ROW.match(line)
        if match and api is not None:
            rows.append((api, match["field"], match["rule"], json.loads(match["example"])))
    return rows


ROWS = _rows()


def test_the_doc_has_a_table_per_api_and_every_rule():
    assert {api for api, *_ in ROWS} == set(APIS)
    assert {rule for _, _, rule, _ in ROWS} == {"honored", "ignored", "refused"}
    assert len(ROWS) > 70


@pytest.mark.parametrize(("api", "field", "rule", "example"), ROWS, ids=[f"{a}:{f}:{r}" for a, f, r, _ in ROWS])
def test_every_row_meets_its_rule(api, field, rule, example):
    base, kind = APIS[api]
    body = {**base, **COMPANIONS.get((api, field), {}), field: example}
    if rule == "refused":
        with pytest.raises(RouterError) as refused:
            _parse(kind, body)
        assert refused.value.status == 400 and refused.value.param.startswith(field), refused.value.message
        return
    built = _parse(kind, body)
    if rule == "ignored":
        assert built == _parse(kind, {**base, **COMPANIONS.get((api, field), {})})
