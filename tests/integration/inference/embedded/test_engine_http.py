"""The embedded engine over real HTTP, checked against transformers on the tiny model."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
import torch

from loongsage.inference.client import EngineError
from loongsage.transfer.session import update_sessions
from loongsage.transfer.transports import pack_inline
from tests.integration.inference.embedded.engine_support import WAIT_S, running_engine, wait_until_queued

torch.set_num_threads(1)
PROMPT = [1, 504, 3458, 314, 253, 1345, 30, 198]


@pytest.fixture(scope="module")
def server(tiny_model_path):
    with running_engine(tiny_model_path, max_context=256) as srv:
        yield srv


def _greedy(max_new_tokens: int, **params) -> dict:
    return {"temperature": 0, "max_new_tokens": max_new_tokens, "ignore_eos": True, **params}


def _hf_greedy(hf_tiny, prompt: list[int], n: int) -> list[int]:
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            ids.append(int(hf_tiny(torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[len(prompt) :]


def _hf_logprobs(hf_tiny, ids: list[int]) -> list[float]:
    """log p(ids[i] | ids[:i]) for i >= 1."""
    with torch.no_grad():
        logits = hf_tiny(torch.tensor([ids])).logits[0]
    return torch.log_softmax(logits[:-1], -1).gather(1, torch.tensor(ids[1:])[:, None])[:, 0].tolist()


@pytest.mark.parametrize(
    "body, field",
    [
        ({"input_ids": [1, 2], "sampling_params": {"temprature": 1.0}}, "sampling_params.temprature"),
        ({"input_ids": [1, 2], "sampling_params": {"max_new_tokens": -1}}, "sampling_params.max_new_tokens"),
        ({"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 300}}, "sampling_params.max_new_tokens"),
        ({"input_ids": [1, 2], "sampling_params": {"temperature": "hot"}}, "sampling_params.temperature"),
        ({"input_ids": [1, 2], "sampling_params": {"top_p": 0}}, "sampling_params.top_p"),
        ({"input_ids": [1, 10**9]}, "input_ids"),
        ({"input_ids": [[1, 2], [3, -4]]}, "input_ids[1]"),
        ({"input_ids": "1 2"}, "input_ids"),
        ({"input_ids": []}, "input_ids"),
        ({"input_ids": [1, 2], "return_logprob": "yes"}, "return_logprob"),
        ({"input_ids": [1, 2], "logprob_start_len": 5}, "logprob_start_len"),
        ({"input_ids": [1, 2], "top_logprobs_num": -1}, "top_logprobs_num"),
        ({"input_ids": [1, 2], "top_logprobs_num": 10**7}, "top_logprobs_num"),
        ({"input_ids": [1, 2], "top_logprobs_num": 2.5}, "top_logprobs_num"),
        ({"input_ids": [[1, 2], [3, 4]], "logprob_start_len": [0]}, "logprob_start_len"),
        ({"input_ids": [1, 2], "colour": 1}, "colour"),
        ({"input_ids": [1, 2], "token_ids_logprob": [5]}, "token_ids_logprob"),  # SGLang's; not implemented here
        ({"sampling_params": {}}, "input_ids"),
        ([1, 2, 3], "body"),
    ],
)
def test_bad_generate_requests_get_400_naming_the_field(server, body, field):
    response = httpx.post(f"{server.base_url}/generate", json=body)
    assert response.status_code == 400
    assert response.json()["error"]["field"] == field


def test_invalid_json_and_control_bodies_get_400(server):
    response = httpx.post(f"{server.base_url}/generate", content=b"{not json", headers={"content-type": "application/json"})
    assert response.status_code == 400 and response.json()["error"]["field"] == "body"
    response = httpx.post(f"{server.base_url}/abort_request", json={"rid": 5})
    assert response.status_code == 400 and response.json()["error"]["field"] == "rid"


def test_client_raises_engine_error_with_message_and_url(client):
    with pytest.raises(EngineError, match=r"/generate -> HTTP 400: .*max_new_tokens"):
        client.generate(input_ids=PROMPT, sampling_params={"max_new_tokens": -3})


def test_greedy_output_and_logprobs_match_transformers(client, hf_tiny):
    out = client.generate(input_ids=PROMPT, sampling_params=_greedy(12), return_logprob=True)
    expected = _hf_greedy(hf_tiny, PROMPT, 12)
    assert out["output_ids"] == expected
    meta = out["meta_info"]
    assert meta["finish_reason"] == {"type": "length", "length": 12}
    assert (meta["prompt_tokens"], meta["completion_tokens"]) == (len(PROMPT), 12)
    ours = [lp for lp, _, _ in meta["output_token_logprobs"]]
    assert [t for _, t, _ in meta["output_token_logprobs"]] == expected
    assert ours == pytest.approx(_hf_logprobs(hf_tiny, PROMPT + expected)[len(PROMPT) - 1 :], abs=1e-5)


def test_prompt_logprobs_and_teacher_scoring(client, hf_tiny):
    ids = PROMPT + [42, 43, 44]
    reference = _hf_logprobs(hf_tiny, ids)
    scored = client.generate(input_ids=ids, sampling_params={"max_new_tokens": 0}, return_logprob=True, logprob_start_len=0)
    entries = scored["meta_info"]["input_token_logprobs"]
    assert scored["output_ids"] == [] and scored["meta_info"]["finish_reason"]["type"] == "length"
    assert entries[0] == [None, ids[0], None]
    assert [t for _, t, _ in entries] == ids
    assert [lp for lp, _, _ in entries[1:]] == pytest.approx(reference, abs=1e-5)
    tail = client.generate(
        input_ids=ids, sampling_params={"max_new_tokens": 0}, return_logprob=True, logprob_start_len=len(PROMPT)
    )
    assert [lp for lp, _, _ in tail["meta_info"]["input_token_logprobs"]] == pytest.approx(reference[len(PROMPT) - 1 :], abs=1e-5)


def _hf_next_logprobs(hf_tiny, ids: list[int]) -> torch.Tensor:
    """log p(. | ids[:i]) for i >= 1: [len - 1, vocab]."""
    with torch.no_grad():
        return torch.log_softmax(hf_tiny(torch.tensor([ids])).logits[0, :-1].double(), -1)


def _assert_top_k(rows: list, reference: torch.Tensor, k: int) -> None:
    """Each row holds k [logprob, id, text] entries, most likely first: the reference's k largest
    values, each id's own logprob (the order of near ties is left to float noise)."""
    assert len(rows) == reference.shape[0]
    for row, expected in zip(rows, reference):
        assert len(row) == k
        values = torch.tensor([lp for lp, _, _ in row], dtype=torch.float64)
        ids = torch.tensor([t for _, t, _ in row])
        assert torch.equal(values, values.sort(descending=True).values)
        assert torch.allclose(values, expected.topk(k).values, atol=1e-5)
        assert torch.allclose(values, expected[ids], atol=1e-5)


def test_top_logprobs_of_a_scored_sequence_are_the_teachers_top_k(client, hf_tiny):
    """Teacher scoring for top-k distillation (SGLang's `top_logprobs_num`): at every position of
    the scored sequence, the k most likely tokens and their logprobs, most likely first."""
    ids = PROMPT + [42, 43, 44]
    reference = _hf_next_logprobs(hf_tiny, ids)
    scored = client.generate(
        input_ids=ids, sampling_params={"max_new_tokens": 0}, return_logprob=True, logprob_start_len=0, top_logprobs_num=5
    )
    entries = scored["meta_info"]["input_top_logprobs"]
    assert len(entries) == len(ids) and entries[0] is None
    _assert_top_k(entries[1:], reference, 5)
    assert scored["meta_info"]["output_top_logprobs"] == []
    # From logprob_start_len on, as the token logprobs; fewer top tokens from the same (cached) prompt.
    start = len(PROMPT)
    tail = client.generate(
        input_ids=ids, sampling_params={"max_new_tokens": 0}, return_logprob=True, logprob_start_len=start, top_logprobs_num=2
    )
    _assert_top_k(tail["meta_info"]["input_top_logprobs"], reference[start - 1 :], 2)


def test_top_logprobs_of_generated_tokens(client, hf_tiny):
    out = client.generate(input_ids=PROMPT, sampling_params=_greedy(4), return_logprob=True, top_logprobs_num=3)
    generated = out["output_ids"]
    rows = out["meta_info"]["output_top_logprobs"]
    _assert_top_k(rows, _hf_next_logprobs(hf_tiny, PROMPT + generated)[len(PROMPT) - 1 :], 3)
    assert [row[0][1] for row in rows] == generated  # greedy: the top token is the one chosen
    assert "input_top_logprobs" not in out["meta_info"]  # no prompt logprobs asked for (logprob_start_len -1)


def test_return_text_in_logprobs_gives_each_tokens_text(client, tiny_model_path):
    from loongsage.models import load_tokenizer

    tokenizer = load_tokenizer(tiny_model_path)
    plain = client.generate(input_ids=PROMPT, sampling_params=_greedy(4), return_logprob=True)
    texts = client.generate(input_ids=PROMPT, sampling_params=_greedy(4), return_logprob=True, return_text_in_logprobs=True)
    assert texts["output_ids"] == plain["output_ids"]
    assert [text for _, _, text in plain["meta_info"]["output_token_logprobs"]] == [None] * 4  # SGLang's default
    assert [text for _, _, text in texts["meta_info"]["output_token_logprobs"]] == [
        tokenizer.decode([token]) for token in texts["output_ids"]
    ]


def test_batch_text_and_stop_token(client):
    first = client.generate(input_ids=PROMPT, sampling_params=_greedy(6))["output_ids"]
    stop_at = first[2]
    out = client.generate(input_ids=[PROMPT, PROMPT[:4]], sampling_params=_greedy(6, stop_token_ids=[stop_at]), rid=["a", "b"])
    assert [o["meta_info"]["id"] for o in out] == ["a", "b"]
    first_stop = first.index(stop_at)
    assert out[0]["output_ids"] == first[: first_stop + 1]
    assert out[0]["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop_at}
    texts = client.generate(text=["Hello there", "Hi"], sampling_params={"max_new_tokens": 3})
    assert len(texts) == 2 and all(isinstance(t["text"], str) for t in texts)


def test_concurrent_requests_are_batched_and_reproducible(server, client):
    prompts = [PROMPT[: 3 + i % 5] + [100 + i] for i in range(16)]
    params = [{"temperature": 1.0, "max_new_tokens": 6 + i, "ignore_eos": True, "sampling_seed": 1000 + i} for i in range(16)]
    before = client.get_server_info()["stats"]["decode_steps"]

    async def all_at_once():
        # Paused, the engine queues the requests as they come; they start together on continue,
        # however the machine's load spreads out their arrival.
        await asyncio.to_thread(client.pause_generation, "in_place")
        try:
            requests = [
                asyncio.create_task(client.agenerate(input_ids=p, sampling_params=s, rid=f"r{i}"))
                for i, (p, s) in enumerate(zip(prompts, params))
            ]
            await asyncio.to_thread(wait_until_queued, server, len(requests))
        finally:
            await asyncio.to_thread(client.continue_generation)
        return await asyncio.gather(*requests)

    batched = asyncio.run(all_at_once())
    stats = client.get_server_info()["stats"]
    assert stats["max_batch_size"] > 1
    # Batching means far fewer steps than the 16 requests' tokens taken one by one.
    assert stats["decode_steps"] - before < sum(s["max_new_tokens"] - 1 for s in params) / 2
    for i, (prompt, sp, out) in enumerate(zip(prompts, params, batched)):
        assert out["meta_info"]["id"] == f"r{i}"
        assert len(out["output_ids"]) == sp["max_new_tokens"]
        alone = client.generate(input_ids=prompt, sampling_params=sp)
        assert alone["output_ids"] == out["output_ids"], f"request {i} differs alone vs batched"


def test_identical_prompts_reuse_the_prefill(client):
    client.flush_cache()
    before = client.get_server_info()["stats"]
    outs = client.generate(input_ids=[PROMPT] * 8, sampling_params={"max_new_tokens": 4, "temperature": 1.0}, return_logprob=True)
    after = client.get_server_info()["stats"]
    assert after["prefills"] - before["prefills"] == 1
    assert after["prompt_cache_hits"] - before["prompt_cache_hits"] == 7
    assert sum(o["meta_info"]["cached_tokens"] for o in outs) == 7 * len(PROMPT)


def test_prompts_opening_alike_prefill_their_common_prefix_once(client, hf_tiny):
    """Distinct prompts sharing a system-prompt-like opening: the opening is prefilled once, each
    prompt computes only its own tail, and the results are those of full prefills."""
    opening = list(range(100, 120))
    prompts = [opening + [7, 8, 9], opening + [11, 12], opening + [13, 14, 15, 16]]
    sampling = _greedy(5)
    client.flush_cache()
    together = client.generate(input_ids=prompts, sampling_params=sampling, return_logprob=True)
    assert [o["meta_info"]["cached_tokens"] for o in together] == [len(opening)] * 3
    for prompt, out in zip(prompts, together):
        assert out["output_ids"] == _hf_greedy(hf_tiny, prompt, 5)
        reference = _hf_logprobs(hf_tiny, prompt + out["output_ids"])[len(prompt) - 1 :]
        got = [lp for lp, _, _ in out["meta_info"]["output_token_logprobs"]]
        assert got == pytest.approx(reference, abs=1e-5)
    # A later prompt with the same opening continues the cached opening too.
    later = client.generate(input_ids=opening + [21, 22], sampling_params=sampling)
    assert later["meta_info"]["cached_tokens"] == len(opening)


def _pause_while_running(client, mode: str = "in_place") -> None:
    """Pause the engine at a moment a request is running (it has sampled tokens and not finished):
    paused, it stays so however loaded the machine. In between tries the engine runs on."""
    deadline = time.monotonic() + WAIT_S
    while True:
        client.pause_generation(mode=mode)
        if client.get_server_info()["running"]:
            return
        client.continue_generation()
        assert time.monotonic() < deadline, f"no request was running within {WAIT_S} s"
        time.sleep(0.005)


def test_abort_returns_partial_output(client):
    async def scenario():
        task = asyncio.create_task(client.agenerate(input_ids=PROMPT, sampling_params=_greedy(240), rid="long"))
        await asyncio.to_thread(_pause_while_running, client)
        try:  # paused mid-generation: the abort finds it part done
            await asyncio.to_thread(client.abort_request, "long")
        finally:
            await asyncio.to_thread(client.continue_generation)
        return await task

    out = asyncio.run(scenario())
    assert out["meta_info"]["finish_reason"]["type"] == "abort"
    assert 0 < len(out["output_ids"]) < 240


def test_abort_all_ends_every_request_in_flight_running_or_queued(server, client):
    async def scenario():
        running = asyncio.create_task(client.agenerate(input_ids=PROMPT, sampling_params=_greedy(240), rid="running"))
        await asyncio.to_thread(_pause_while_running, client)  # held mid-generation
        try:
            queued = asyncio.create_task(client.agenerate(input_ids=PROMPT[:5], sampling_params=_greedy(240), rid="queued"))
            await asyncio.to_thread(wait_until_queued, server, 1)  # sent while paused: waits, not started
            answer = await asyncio.to_thread(client.abort_request, abort_all=True)  # rid "": every request
        finally:
            await asyncio.to_thread(client.continue_generation)
        return answer, await running, await queued

    answer, running, queued = asyncio.run(scenario())
    assert answer == {"success": True, "aborted": 2}
    for out in (running, queued):
        assert out["meta_info"]["finish_reason"]["type"] == "abort", out["meta_info"]
    assert 0 < len(running["output_ids"]) < 240 and queued["output_ids"] == []
    # It ends what is in flight, nothing sent later.
    assert len(client.generate(input_ids=PROMPT, sampling_params=_greedy(3))["output_ids"]) == 3


@pytest.mark.parametrize("body", [{}, {"rid": ""}, {"rid": None, "abort_all": False}])
def test_abort_request_without_rid_or_abort_all_is_400(server, client, body):
    """SGLang 0.5.23 answers 200 and does nothing here (docs/sglang_protocol.md, difference 18)."""
    response = httpx.post(f"{server.base_url}/abort_request", json=body)
    assert response.status_code == 400 and response.json()["error"]["field"] == "rid"
    with pytest.raises(EngineError) as refused:
        client.abort_request()  # what our client sends then: {"rid": "", "abort_all": false}
    assert refused.value.status == 400


def test_flush_pause_and_continue_answer_json_success(server, client):
    client.generate(input_ids=PROMPT, sampling_params=_greedy(2))
    assert client.get_server_info()["prompt_cache_entries"] > 0
    assert client.flush_cache() == {"success": True, "message": "Cache flushed."}  # SGLang: text/plain
    assert client.get_server_info()["prompt_cache_entries"] == 0
    assert client.pause_generation("in_place") == {"success": True}
    assert client.get_server_info()["paused"] is True
    # SGLang's continue body ({"torch_empty_cache": true}, its default) is accepted and ignored.
    response = httpx.post(f"{server.base_url}/continue_generation", json={"torch_empty_cache": True})
    assert response.status_code == 200 and response.json() == {"success": True}
    assert client.get_server_info()["paused"] is False


@pytest.mark.parametrize("mode", ["in_place", "retract"])  # retract: in_place here (no KV to give back)
def test_pause_holds_the_batch_until_continue(client, mode):
    async def scenario():
        task = asyncio.create_task(client.agenerate(input_ids=PROMPT, sampling_params=_greedy(240)))
        await asyncio.to_thread(_pause_while_running, client, mode)
        try:
            steps = client.get_server_info()["stats"]["decode_steps"]
            await asyncio.sleep(0.3)
            info = client.get_server_info()
            assert info["paused"] and info["running"] == 1 and not task.done()
            assert info["stats"]["decode_steps"] == steps
        finally:
            await asyncio.to_thread(client.continue_generation)
        return await task

    out = asyncio.run(scenario())
    assert out["meta_info"]["finish_reason"]["type"] == "length" and len(out["output_ids"]) == 240


def test_pause_abort_answers_what_is_in_flight_and_holds_new_requests(server, client):
    """SGLang's default mode (a body without one): the running request is answered at once, 200
    with the tokens it had and finish_reason abort; a request sent while paused waits for continue."""

    async def scenario():
        cut = asyncio.create_task(client.agenerate(input_ids=PROMPT, sampling_params=_greedy(240), rid="cut"))
        await asyncio.to_thread(_pause_while_running, client)  # in_place: known to be mid-generation
        late = None
        try:
            paused = await asyncio.to_thread(httpx.post, f"{server.base_url}/pause_generation", json={})
            assert paused.status_code == 200, paused.text
            partial = await asyncio.wait_for(cut, WAIT_S)  # answered while the engine stays paused
            late = asyncio.create_task(client.agenerate(input_ids=PROMPT, sampling_params=_greedy(3)))
            await asyncio.to_thread(wait_until_queued, server, 1)
            await asyncio.sleep(0.2)
            assert not late.done() and client.get_server_info()["paused"]
        finally:
            await asyncio.to_thread(client.continue_generation)
        return partial, await late

    partial, late = asyncio.run(scenario())
    reason = partial["meta_info"]["finish_reason"]
    assert reason["type"] == "abort" and {"message", "status_code", "err_type"} <= set(reason)
    n = len(partial["output_ids"])
    assert 0 < n < 240 and partial["meta_info"]["completion_tokens"] == n
    # The partial output is what the request had generated: the greedy tokens so far.
    assert client.generate(input_ids=PROMPT, sampling_params=_greedy(n))["output_ids"] == partial["output_ids"]
    assert late["meta_info"]["finish_reason"]["type"] == "length" and len(late["output_ids"]) == 3


@pytest.mark.parametrize("body", [{"mode": "abort_all"}, {"mode": 1}, {"mode": ""}, ["abort"]])
def test_pause_with_a_bad_mode_is_400_and_pauses_nothing(server, client, body):
    response = httpx.post(f"{server.base_url}/pause_generation", json=body)
    assert response.status_code == 400
    assert response.json()["error"]["field"] == ("body" if isinstance(body, list) else "mode")
    assert client.get_server_info()["paused"] is False


def test_update_weights_from_tensor_changes_outputs_and_version(client, hf_tiny, tiny_model_path):
    original = client.generate(input_ids=PROMPT, sampling_params=_greedy(8))
    named = [(n, p.detach() * 3.0) for n, p in hf_tiny.named_parameters()]

    with update_sessions([client]):
        with pack_inline(named[:2] + [("model.layers.0.mlp.nope.weight", torch.zeros(2))]) as payload:
            with pytest.raises(EngineError, match="nope"):
                client.update_weights_from_tensor([payload], load_format="inline", weight_version="6")
        with pack_inline([("model.norm.weight", torch.zeros(7))]) as payload:
            with pytest.raises(EngineError, match="model.norm.weight"):
                client.update_weights_from_tensor([payload], load_format="inline", weight_version="6")
    assert client.get_weight_version() == "default"
    assert client.generate(input_ids=PROMPT, sampling_params=_greedy(8))["output_ids"] == original["output_ids"]

    with update_sessions([client]), pack_inline(named) as payload:
        client.update_weights_from_tensor([payload], load_format="inline", weight_version="7")
    updated = client.generate(input_ids=PROMPT, sampling_params=_greedy(8))
    assert client.get_weight_version() == "7" and client.get_model_info()["weight_version"] == "7"
    assert updated["meta_info"]["weight_version"] == "7"
    assert updated["output_ids"] != original["output_ids"]

    client.update_weights_from_disk(str(tiny_model_path), weight_version="8")
    restored = client.generate(input_ids=PROMPT, sampling_params=_greedy(8))
    assert restored["output_ids"] == original["output_ids"]
    assert restored["meta_info"]["weight_version"] == "8"


def test_update_weights_from_disk_takes_load_format_as_a_string_and_ignores_it(server, client, tiny_model_path):
    """SGLang reads load_format (null: the server's own); the embedded engine reads safetensors
    whatever it says, and refuses a value that is not a string, as SGLang's schema would (422)."""
    answer = client.update_weights_from_disk(tiny_model_path, weight_version="formatted", load_format="safetensors")
    assert answer == {"success": True, "message": f"loaded {tiny_model_path}", "weight_version": "formatted"}
    body = {"model_path": tiny_model_path, "load_format": 1, "weight_version": "never"}
    response = httpx.post(f"{server.base_url}/update_weights_from_disk", json=body)
    assert response.status_code == 400 and response.json()["error"]["field"] == "load_format"
    assert client.get_weight_version() == "formatted"


def test_health_endpoints(client):
    assert client.health() and client.health_generate()
    info = client.get_model_info()
    assert info["is_generation"] is True and info["model_path"].endswith("tiny")


def test_model_and_server_info_under_sglangs_new_and_deprecated_paths(server, client):
    """SGLang 0.5.23 reports the weight version in /model_info only (no /get_weight_version)."""
    model = [httpx.get(f"{server.base_url}{path}").json() for path in ("/model_info", "/get_model_info")]
    assert model[0] == model[1] and model[0]["weight_version"] == client.get_weight_version()
    servers = [httpx.get(f"{server.base_url}{path}").json() for path in ("/server_info", "/get_server_info")]
    assert servers[0].keys() == servers[1].keys() and servers[0]["tp_size"] == 1
    assert servers[0]["max_context"] == 256  # flat: the engine's settings at the top level
