"""Trajectory ids of any shape reach the router intact through the official `openai` client, and
each trajectory's key opens its own routes only; the admin key lists, exports and deletes."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.integration.agentflow.router_support import auth, http

IDS = [
    "owner/repo#12",
    ".",
    "..",
    "a/../b",
    "./x",
    "/leading",
    "trailing/",
    "q?x=1&y=2",
    "100%",
    "%2F",
    "%2e%2e",
    "with space",
    "tab\there",
    "ünïcødé/日本語",
    "emoji 😀",
    "~tilde~7E",
    "back\\slash",
    "v1",
    "trajectories",
    "-",
]


@pytest.fixture(scope="module")
def router_settings() -> dict:
    return {"max_context": 512}


def _agent(router, trajectory_id: str, key: str | None = None, attempt: int | str = 0) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=router.url_for(trajectory_id, attempt),
        max_retries=0,
        api_key=key if key is not None else router.router.key_for(trajectory_id),
    )


def _ask(client: openai.OpenAI) -> str:
    completion = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=4)
    return completion.choices[0].message.content


@pytest.mark.parametrize("trajectory_id", IDS)
def test_any_id_round_trips_through_url_for(router, engine, trajectory_id):
    engine.say("ok")
    assert _ask(_agent(router, trajectory_id, attempt="retry/2")) == "ok"
    assert trajectory_id in http().get(f"{router.base_url}/trajectories", headers=auth(router)).json()["ids"]
    exported = http().get(router.trajectory_url(trajectory_id), headers=auth(router))
    assert exported.status_code == 200 and exported.json()["id"] == trajectory_id
    assert exported.json()["branches"][0]["attempt"] == "retry/2"
    deleted = http().delete(router.trajectory_url(trajectory_id), headers=auth(router))
    assert deleted.json() == {"id": trajectory_id, "deleted": True}
    assert router.router.store.get(trajectory_id) is None


def test_a_trajectory_key_opens_its_own_trajectory_only(router, engine):
    engine.reset()
    engine.say("mine")
    mine = router.router.key_for("team/alice")
    assert _ask(_agent(router, "team/alice")) == "mine"
    assert [m.id for m in _agent(router, "team/alice").models.list()] == ["tiny"]
    engine.say("theirs")
    assert _ask(_agent(router, "team/bob")) == "theirs"

    with pytest.raises(openai.AuthenticationError, match="own URL"):
        _ask(_agent(router, "team/bob", key=mine))
    with pytest.raises(openai.AuthenticationError):
        _agent(router, "team/bob", key=mine).models.list()
    anonymous = openai.OpenAI(base_url=f"{router.base_url}/v1", api_key=mine, max_retries=0)
    with pytest.raises(openai.AuthenticationError, match="admin key"):
        _ask(anonymous)
    as_alice = {"Authorization": f"Bearer {mine}"}
    for method, url in (
        ("GET", f"{router.base_url}/trajectories"),
        ("GET", router.trajectory_url("team/bob")),
        ("GET", router.trajectory_url("team/alice")),
        ("DELETE", router.trajectory_url("team/bob")),
        ("DELETE", router.trajectory_url("team/alice")),
    ):
        response = http().request(method, url, headers=as_alice)
        assert response.status_code == 401 and "admin key" in response.json()["error"]["message"], (method, url)
    assert {"team/alice", "team/bob"} <= set(router.router.store.ids())  # nothing was deleted
    assert len(engine.requests) == 2  # the refused calls never reached the engine

    listing = http().get(f"{router.base_url}/trajectories", headers=auth(router)).json()["ids"]
    assert {"team/alice", "team/bob"} <= set(listing)
    assert http().get(router.trajectory_url("team/bob"), headers=auth(router)).json()["id"] == "team/bob"
    engine.reset()


@pytest.mark.parametrize("trajectory_id", ["a/b", "owner/repo#12", "..", "100%", "~tilde~7E", "a~2Fb"])
def test_admin_routes_take_the_id_percent_encoded(router, engine, trajectory_id):
    """As people and HTTP clients write an id: every character but unreserved ones %XX-encoded
    (`..` too: clients drop a literal `..` segment)."""
    engine.say("ok")
    _ask(_agent(router, trajectory_id))
    encoded = "".join(c if c.isalnum() or c in "-_~" else f"%{ord(c):02X}" for c in trajectory_id)
    url = f"{router.base_url}/trajectories/{encoded}"
    exported = http().get(url, headers=auth(router))
    assert exported.status_code == 200 and exported.json()["id"] == trajectory_id
    assert http().delete(url, headers=auth(router)).json() == {"id": trajectory_id, "deleted": True}
    missing = http().get(url, headers=auth(router))
    assert missing.status_code == 404 and missing.json()["error"]["param"] == "trajectory_id"


def test_the_admin_key_still_opens_every_trajectory(router, engine):
    engine.say("admin")
    assert _ask(_agent(router, "any/one", key=router.router.api_key)) == "admin"


def test_malformed_segments_are_400_naming_them(router):
    url = f"{router.base_url}/bad~zz/0/v1/chat/completions"
    response = httpx.post(url, headers=auth(router), json={"model": "tiny", "messages": []})
    assert response.status_code == 400 and response.json()["error"]["param"] == "trajectory_id"
    # An admin route reads a segment that is no ~ escape as the id itself ("~FF" may be one).
    response = http().get(f"{router.base_url}/trajectories/~FF", headers=auth(router))
    assert response.status_code == 404 and "'~FF' not found" in response.json()["error"]["message"]
    with pytest.raises(ValueError, match="empty"):
        router.url_for("")
