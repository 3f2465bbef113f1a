"""Hostile requests at the embedded engine's /generate over real HTTP: each is a 400 (413 for
size) naming the field, none disturbs the requests batched with it, and an engine failure is a
500 for the requests it hit, never a 200 with an empty reply."""

from __future__ import annotations

import asyncio
import dataclasses
import threading

import httpx
import pytest
import torch

from loongsage.inference.client import EngineError
from loongsage.inference.embedded import server as engine_server
from loongsage.inference.embedded.request import Sequence
from loongsage.inference.embedded.sampling import SamplingParams
from tests.integration.inference.embedded.engine_support import running_engine, wait_until_queued

torch.set_num_threads(1)
PROMPT = [1, 504, 3458, 314, 253, 1345, 30, 198]
LONG_INT = "9" * 5000
LONE = "\\ud800"


@pytest.fixture(scope="module")
def server(tiny_model_path):
    with running_engine(tiny_model_path, max_context=128) as srv:
        yield srv


def _body(params: str = "", extra: str = "", ids: str = "[1, 2, 3]") -> str:
    return f'{{"input_ids": {ids}, "sampling_params": {{"max_new_tokens": 2{params}}}{extra}}}'


CASES = [
    (f'{{"text": "a{LONE}", "sampling_params": {{"max_new_tokens": 2}}}}', "text"),
    (f'{{"text": ["ok", "{LONE}"], "sampling_params": {{"max_new_tokens": 2}}}}', "text[1]"),
    (_body(extra=f', "rid": "{LONE}"'), "rid"),
    (_body(f', "stop": ["{LONE}"]'), "sampling_params.stop[0]"),
    (_body(f', "top_k": {2**70}'), "sampling_params.top_k"),
    (_body(f', "top_k": {2**31}'), "sampling_params.top_k"),
    (_body(f', "sampling_seed": {2**64}'), "sampling_params.sampling_seed"),
    (_body(f', "sampling_seed": {-(2**63) - 1}'), "sampling_params.sampling_seed"),
    (_body(', "temperature": NaN'), "sampling_params.temperature"),
    (_body(', "temperature": Infinity'), "sampling_params.temperature"),
    (_body(', "temperature": -1'), "sampling_params.temperature"),
    (_body(f', "temperature": {LONG_INT[:400]}'), "sampling_params.temperature"),
    (_body(', "top_p": NaN'), "sampling_params.top_p"),
    (_body(f', "stop_token_ids": [{2**70}]'), "sampling_params.stop_token_ids"),
    (_body(f', "top_k": {LONG_INT}'), "sampling_params.top_k"),
    (_body(ids=f"[1, {LONG_INT}]"), "input_ids[1]"),
    (_body(extra=f', "logprob_start_len": {2**70}'), "logprob_start_len"),
    (_body(extra=f', "rid": {{"x": {"[" * 100 + "]" * 100}}}'), "rid.x"),
    ('{"input_ids": ' + "[" * 100_000 + "1" + "]" * 100_000 + "}", "body"),
    (b'{"text": "\xff"}', "body"),
]


@pytest.mark.parametrize("raw, field", CASES, ids=[field for _, field in CASES])
def test_hostile_generate_requests_get_400_naming_the_field(server, raw, field):
    response = httpx.post(f"{server.base_url}/generate", content=raw, headers={"content-type": "application/json"})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["field"].startswith(field), response.text


@pytest.mark.parametrize(
    "params",
    [
        {"temperature": 1.401298464324817e-45, "top_p": 0.5},  # tempered logits overflowed to inf -> NaN
        {"temperature": 1e-300},
        {"temperature": 1e-45, "top_k": 5},
        {"top_p": 5e-324},
        {"top_k": 2**31 - 1, "sampling_seed": 2**64 - 1},
        {"sampling_seed": -(2**63)},
        {"temperature": 1e300},
    ],
)
def test_extreme_but_valid_sampling_parameters_generate(client, params):
    out = client.generate(input_ids=PROMPT, sampling_params={"max_new_tokens": 3, "ignore_eos": True, **params})
    assert len(out["output_ids"]) == 3


def test_oversize_generate_body_is_413(server, monkeypatch):
    monkeypatch.setattr(engine_server, "GENERATE_MAX_BODY_BYTES", 1024)
    response = httpx.post(f"{server.base_url}/generate", json={"input_ids": [1] * 1000})
    assert response.status_code == 413 and response.json()["error"]["field"] == "body"


def test_bad_requests_leave_the_batch_they_join_untouched(server, client):
    """Good seeded requests run alone, then again with hostile ones arriving while they wait in
    the engine's queue (paused, so they are known to be there): every good one gets the same
    tokens and a normal finish; every hostile one its own 400."""
    good = [{"temperature": 1.0, "max_new_tokens": 48, "ignore_eos": True, "sampling_seed": 7 + i} for i in range(6)]
    alone = [client.generate(input_ids=PROMPT + [i], sampling_params=sp)["output_ids"] for i, sp in enumerate(good)]
    hostile = [
        _body(f', "top_k": {2**70}'),
        _body(f', "sampling_seed": {2**70}'),
        _body(', "temperature": NaN'),
        _body(', "top_p": Infinity'),
        f'{{"text": "{LONE}"}}',
    ]

    async def together():
        await asyncio.to_thread(client.pause_generation, "in_place")
        try:
            goods = [
                asyncio.create_task(client.agenerate(input_ids=PROMPT + [i], sampling_params=sp)) for i, sp in enumerate(good)
            ]
            await asyncio.to_thread(wait_until_queued, server, len(good))
            async with httpx.AsyncClient(base_url=server.base_url) as raw:
                bads = await asyncio.gather(*(raw.post("/generate", content=body) for body in hostile))
        finally:
            await asyncio.to_thread(client.continue_generation)
        return await asyncio.gather(*goods), bads

    goods, bads = asyncio.run(together())
    assert [b.status_code for b in bads] == [400] * len(hostile)
    for i, out in enumerate(goods):
        assert out["output_ids"] == alone[i] and out["meta_info"]["finish_reason"]["type"] == "length"


def test_an_engine_failure_is_a_500_not_an_empty_success(server, client):
    model = server.engine.scheduler.model

    def broken_decode(*args, **kwargs):
        raise RuntimeError("injected decode failure")

    model.decode = broken_decode  # the scheduler thread picks it up at its next step
    try:
        with pytest.raises(EngineError, match="injected decode failure") as raised:
            client.generate(input_ids=PROMPT, sampling_params={"max_new_tokens": 8})
        assert raised.value.status == 500
    finally:
        del model.decode
    assert len(client.generate(input_ids=PROMPT, sampling_params={"max_new_tokens": 8})["output_ids"]) > 0


def test_a_request_that_breaks_sampling_fails_alone(server, client):
    """Defence behind validation: a sequence whose parameters break the batched sampling step
    (submitted to the scheduler directly, as a value validation missed would arrive) is failed on
    its own, and the sequences sharing its steps finish with the tokens they get alone."""
    good = [SamplingParams(temperature=1.0, max_new_tokens=16, ignore_eos=True, sampling_seed=3 + i) for i in range(4)]
    alone = [
        client.generate(input_ids=PROMPT + [i], sampling_params=dataclasses.asdict(sp))["output_ids"] for i, sp in enumerate(good)
    ]
    bad = SamplingParams(max_new_tokens=16, top_k=2**70)
    done = threading.Semaphore(0)
    seqs = [
        Sequence(rid=f"good-{i}", prompt_ids=PROMPT + [i], params=sp, stop_ids=frozenset(), on_done=lambda _: done.release())
        for i, sp in enumerate(good)
    ]
    seqs.insert(2, Sequence(rid="bad", prompt_ids=PROMPT, params=bad, stop_ids=frozenset(), on_done=lambda _: done.release()))
    for seq in seqs:
        server.engine.scheduler.submit(seq)
    for _ in seqs:
        assert done.acquire(timeout=60)
    assert seqs.pop(2).error is not None
    for seq, expected in zip(seqs, alone):
        assert seq.error is None and seq.output_ids == expected
