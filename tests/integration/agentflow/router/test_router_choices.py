"""What agents ask of the router beyond one reply per chat request, with the official `openai`
client against the real embedded engine (tiny model) behind a recording proxy: `n` choices of
one prompt (each recorded, each continuable), `top_logprobs` on chat and on the Responses API,
and the legacy `/v1/completions` (text in, text out, no chat template)."""

from __future__ import annotations

import openai
import pytest

from tests.integration.agentflow.router_support import auth, get_trajectory, http, recorded_embedded_engine
from tests.standins.engine import EOS

VERSION = 5
QUESTION = [{"role": "user", "content": "Name a colour."}]


@pytest.fixture(scope="module")
def proxy(tiny_model_path):
    with recorded_embedded_engine(tiny_model_path, VERSION) as recording:
        yield recording


@pytest.fixture(scope="module")
def engine_url(proxy) -> str:
    return proxy.url


def client(router, trajectory_id: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=router.url_for(trajectory_id), api_key=router.router.api_key, max_retries=0)


def engine_call(proxy, turn: dict) -> tuple[dict, dict]:
    """What the engine was sent for a recorded turn and what it answered; the turn must hold both."""
    (rid,) = turn["rids"]
    sent, answer = proxy.calls[rid]
    assert sent["input_ids"] == turn["prompt_ids"] and answer["output_ids"] == turn["output_ids"]
    return sent, answer


def visible(tokenizer, ids: list[int]) -> str:
    return tokenizer.decode(ids[:-1] if ids[-1:] == [EOS] else ids, skip_special_tokens=True)


def test_n_choices_are_sampled_with_seeds_in_turn_each_recorded_and_each_continuable(router, proxy, tokenizer):
    agent = client(router, "three-choices")
    completion = agent.chat.completions.create(model="tiny", messages=QUESTION, n=3, seed=40, max_tokens=12)
    assert [c.index for c in completion.choices] == [0, 1, 2]
    branches = get_trajectory(router, "three-choices")["branches"]
    assert len(branches) == 3 and all(len(b["turns"]) == 1 for b in branches)
    by_content = {b["turns"][0]["message"]["content"]: b for b in branches}
    seeds = set()
    for choice in completion.choices:
        turn = by_content[choice.message.content]["turns"][0]
        sent, _ = engine_call(proxy, turn)
        seeds.add(sent["sampling_params"]["sampling_seed"])
        assert choice.message.content == visible(tokenizer, turn["output_ids"])
    assert seeds == {40, 41, 42}, "one seed n times would give n copies of one reply"
    assert len({c.message.content for c in completion.choices}) > 1
    total = sum(len(b["turns"][0]["output_ids"]) for b in branches)
    assert completion.usage.completion_tokens == total
    assert completion.usage.prompt_tokens == len(branches[0]["turns"][0]["prompt_ids"])

    # Choice 1 with its own seed alone is the same reply: choices are ordinary samples.
    alone = client(router, "choice-alone").chat.completions.create(model="tiny", messages=QUESTION, seed=41, max_tokens=12)
    turn_alone = get_trajectory(router, "choice-alone")["branches"][0]["turns"][0]
    turn_41 = next(
        b["turns"][0] for b in branches if proxy.calls[b["turns"][0]["rids"][0]][0]["sampling_params"]["sampling_seed"] == 41
    )
    assert turn_alone["output_ids"] == turn_41["output_ids"]
    assert alone.choices[0].message.content == turn_41["message"]["content"]

    # The agent goes on from the choice it picked: that branch is extended, token for token.
    picked = next(c for c in completion.choices if c.message.content == turn_41["message"]["content"])
    history = [*QUESTION, picked.message.model_dump(exclude_none=True), {"role": "user", "content": "Another?"}]
    agent.chat.completions.create(model="tiny", messages=history, max_tokens=4)
    extended = [b for b in get_trajectory(router, "three-choices")["branches"] if len(b["turns"]) == 2]
    (branch,) = extended
    first, second = branch["turns"]
    assert first["output_ids"] == turn_41["output_ids"]
    assert (
        second["prompt_ids"][: len(first["prompt_ids"]) + len(first["output_ids"])] == first["prompt_ids"] + first["output_ids"]
    )


def test_n_choices_stream_each_with_its_own_index_and_finish(router):
    stream = client(router, "streamed-choices").chat.completions.create(
        model="tiny", messages=QUESTION, n=2, seed=7, max_tokens=6, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    texts, finishes = {0: "", 1: ""}, {}
    for chunk in chunks:
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
            if choice.finish_reason:
                finishes[choice.index] = choice.finish_reason
    recorded = sorted(b["turns"][0]["message"]["content"] for b in get_trajectory(router, "streamed-choices")["branches"])
    assert sorted(texts.values()) == recorded and set(finishes) == {0, 1}
    assert chunks[-1].usage.completion_tokens == sum(
        len(b["turns"][0]["output_ids"]) for b in get_trajectory(router, "streamed-choices")["branches"]
    )


def test_top_logprobs_are_the_engines_most_likely_tokens_at_each_position(router, proxy, tokenizer):
    completion = client(router, "top-k").chat.completions.create(
        model="tiny", messages=QUESTION, max_tokens=8, seed=3, logprobs=True, top_logprobs=4
    )
    (turn,) = get_trajectory(router, "top-k")["branches"][0]["turns"]
    sent, answer = engine_call(proxy, turn)
    assert sent["top_logprobs_num"] == 4
    content = completion.choices[0].logprobs.content
    assert len(content) == len(turn["output_ids"])
    for position, (token, token_id, sampled_lp) in enumerate(zip(content, turn["output_ids"], turn["output_logprobs"])):
        assert token.token == tokenizer.decode([token_id]) and token.logprob == sampled_lp
        engine_top = answer["meta_info"]["output_top_logprobs"][position]
        assert [(t.token, t.logprob) for t in token.top_logprobs] == [(tokenizer.decode([i]), lp) for lp, i, _ in engine_top]
        assert len(token.top_logprobs) == 4
        assert all(a.logprob >= b.logprob for a, b in zip(token.top_logprobs, token.top_logprobs[1:]))
        assert token.top_logprobs[0].logprob >= token.logprob - 1e-6
    # Without top_logprobs the engine is not asked for them (SGLang computes what it is asked).
    client(router, "no-top-k").chat.completions.create(model="tiny", messages=QUESTION, max_tokens=2, logprobs=True)
    sent, _ = engine_call(proxy, get_trajectory(router, "no-top-k")["branches"][0]["turns"][0])
    assert "top_logprobs_num" not in sent


def test_responses_api_returns_logprobs_with_their_alternatives(router, proxy):
    agent = client(router, "responses-top-k")
    response = agent.responses.create(
        model="tiny", input="Name a colour.", max_output_tokens=6, top_logprobs=2, include=["message.output_text.logprobs"]
    )
    (turn,) = get_trajectory(router, "responses-top-k")["branches"][0]["turns"]
    _, answer = engine_call(proxy, turn)
    logprobs = response.output[0].content[0].logprobs
    assert [lp.logprob for lp in logprobs] == turn["output_logprobs"]
    assert all(len(lp.top_logprobs) == 2 for lp in logprobs)
    assert [lp.top_logprobs[0].logprob for lp in logprobs] == [top[0][0] for top in answer["meta_info"]["output_top_logprobs"]]
    events = list(agent.responses.create(model="tiny", input="Again.", max_output_tokens=4, top_logprobs=1, stream=True))
    (delta,) = [e for e in events if e.type == "response.output_text.delta"]
    assert len(delta.logprobs) == events[-1].response.usage.output_tokens


def test_legacy_completions_send_the_prompt_as_text_and_record_the_turns(router, proxy, tokenizer):
    agent = client(router, "legacy")
    prompt = "Once upon a time"
    completion = agent.completions.create(model="tiny", prompt=prompt, max_tokens=8, n=2, seed=11, logprobs=2)
    assert completion.object == "text_completion" and [c.index for c in completion.choices] == [0, 1]
    branches = get_trajectory(router, "legacy")["branches"]
    assert len(branches) == 2
    for branch in branches:
        (turn,) = branch["turns"]
        sent, _ = engine_call(proxy, turn)
        assert sent["input_ids"] == tokenizer.encode(prompt, add_special_tokens=False), "no chat template around the prompt"
    by_text = {b["turns"][0]["message"]["content"]: b for b in branches}
    for choice in completion.choices:
        turn = by_text[choice.text]["turns"][0]
        assert choice.text == visible(tokenizer, turn["output_ids"])
        assert choice.logprobs.token_logprobs == turn["output_logprobs"]
        assert choice.logprobs.tokens == [tokenizer.decode([t]) for t in turn["output_ids"]]
        assert all(len(alternatives) == 2 for alternatives in choice.logprobs.top_logprobs)
        assert choice.logprobs.text_offset[0] == len(prompt)
        assert choice.logprobs.text_offset[1] == len(prompt) + len(choice.logprobs.tokens[0])
    assert completion.usage.completion_tokens == sum(len(b["turns"][0]["output_ids"]) for b in branches)

    # An agent that appends the text it got and goes on extends the turn's own ids. The choice is
    # one cut by max_tokens (no end-of-turn token) whose text is all of what was sampled (this
    # random model also samples special tokens, which the text leaves out: a new branch then).
    cut = next(
        c
        for c, b in zip(completion.choices, [by_text[c.text] for c in completion.choices])
        if c.finish_reason == "length" and tokenizer.decode(b["turns"][0]["output_ids"]) == c.text
    )
    agent.completions.create(model="tiny", prompt=prompt + cut.text + " and", max_tokens=3)
    (branch,) = [b for b in get_trajectory(router, "legacy")["branches"] if len(b["turns"]) == 2]
    first, second = branch["turns"]
    assert first["message"]["content"] == cut.text
    assert second["inherited_prompt_tokens"] == len(first["prompt_ids"]) + len(first["output_ids"])


def test_legacy_completions_batch_streaming_and_refusals(router, tokenizer):
    anonymous = openai.OpenAI(base_url=f"{router.base_url}/v1", api_key=router.router.api_key, max_retries=0)
    batch = anonymous.completions.create(model="tiny", prompt=["Red", "Blue"], n=2, max_tokens=3, seed=1)
    assert [c.index for c in batch.choices] == [0, 1, 2, 3]
    prompt_tokens = len(tokenizer.encode("Red", add_special_tokens=False)) + len(
        tokenizer.encode("Blue", add_special_tokens=False)
    )
    assert batch.usage.prompt_tokens == prompt_tokens
    # seeds 1 and 2 for each prompt: the same seed on the same text is the same sample
    alone = anonymous.completions.create(model="tiny", prompt="Blue", max_tokens=3, seed=2)
    assert batch.choices[3].text == alone.choices[0].text

    stream = anonymous.completions.create(model="tiny", prompt="Green", max_tokens=5, seed=9, stream=True)
    streamed = list(stream)
    again = anonymous.completions.create(model="tiny", prompt="Green", max_tokens=5, seed=9)
    assert "".join(c.choices[0].text for c in streamed) == again.choices[0].text
    assert [c.choices[0].finish_reason for c in streamed][-1] == again.choices[0].finish_reason

    for kwargs, field in (
        ({"prompt": [1, 2, 3]}, "prompt[0]"),
        ({"prompt": "x", "echo": True}, "echo"),
        ({"prompt": "x", "suffix": "y"}, "suffix"),
        ({"prompt": "x", "best_of": 3}, "best_of"),
        ({"prompt": "x", "logprobs": 21}, "logprobs"),
        ({"prompt": "x", "frequency_penalty": 0.5}, "frequency_penalty"),
    ):
        with pytest.raises(openai.BadRequestError) as refused:
            anonymous.completions.create(model="tiny", max_tokens=2, **kwargs)
        assert refused.value.body["param"] == field and field in refused.value.body["message"]


def test_a_choice_that_fails_fails_the_request_and_names_it(router):
    """n choices share the request's limits: one that cannot fit is a 400 for the request."""
    too_long = [{"role": "user", "content": "word " * 600}]  # past the engine's context of 512
    with pytest.raises(openai.BadRequestError) as refused:
        client(router, "too-long").chat.completions.create(model="tiny", messages=too_long, n=2, max_tokens=8)
    assert refused.value.body["param"] == "messages"
    assert get_trajectory_ids(router).isdisjoint({"too-long"}), "a refused request leaves no trace"


def get_trajectory_ids(router) -> set[str]:
    return set(http().get(f"{router.base_url}/trajectories", headers=auth(router)).json()["ids"])
