"""The router's core: one chat request in, one recorded turn and one assistant reply out.

Both HTTP front ends call `Router.complete`; nothing here knows about a wire format.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import sys
from dataclasses import replace

from loongsage.agentflow.router.chat_format import assistant_text, get_chat_format
from loongsage.agentflow.router.config import RouterConfig
from loongsage.agentflow.router.errors import RouterError, bad_request
from loongsage.agentflow.router.in_flight import InFlight
from loongsage.agentflow.router.keys import Keys
from loongsage.agentflow.router.messages import ChatRequest, Sampling, TokenLogprob, TurnResult
from loongsage.agentflow.router.openai_api import parse_chat_completion
from loongsage.agentflow.router.responses_api import ResponseHistory
from loongsage.agentflow.router.store import TrajectoryStore
from loongsage.agentflow.router.trajectory import Trajectory, Turn
from loongsage.agentflow.router.turns import make_turn
from loongsage.agentflow.router.validation import INT64_MIN
from loongsage.inference.activity import ActivityMeter
from loongsage.inference.client import EngineClient, EngineError
from loongsage.inference.engine_pool import EnginePool, NoEngineAvailable
from loongsage.inference.engine_roster import EngineRoster
from loongsage.inference.resumable import UNVERSIONED, Generation, generate_resumable
from loongsage.models import load_tokenizer, resolve_model_path
from loongsage.sampling import SamplingDefaults

log = logging.getLogger(__name__)


class Router:
    """Tokenizer, chat format, engines and the trajectory store; `store.pop(id)` hands a finished
    trajectory to the controller (see export.to_samples). Request handling runs on one event loop.

    `roster`: the run's shared view of its engines (down, lacking the published weights), so the
    router stops sending to an engine the controller's own requests found broken, and the other
    way round; None: one of its own over `cfg.engine_urls`."""

    def __init__(
        self, cfg: RouterConfig, tokenizer=None, activity: ActivityMeter | None = None, roster: EngineRoster | None = None
    ):
        self.cfg = cfg
        # Shared with the rollout side when the controller measures the engines' idle time.
        self.activity = activity or ActivityMeter()
        self.api_key = cfg.api_key or secrets.token_urlsafe(32)  # the admin key: every route
        self.keys = Keys(self.api_key)
        self.model_names = cfg.model_names
        self.tokenizer = tokenizer if tokenizer is not None else load_tokenizer(resolve_model_path(cfg.model))
        self.chat_format = get_chat_format(cfg.chat_format, self.tokenizer)
        self.store = TrajectoryStore()
        self.responses = ResponseHistory()  # what previous_response_id continues (Responses API)
        self.engines = EnginePool(_roster(cfg, roster), cfg.request_timeout_s)
        self.in_flight = InFlight()
        self._max_context = cfg.max_context
        self._context_probe: asyncio.Future | None = None

    def key_for(self, trajectory_id: str) -> str:
        """The key to hand the agent of `trajectory_id`: it opens that trajectory's routes only."""
        return self.keys.for_trajectory(trajectory_id)

    async def complete(self, trajectory_id: str | None, attempt: str, request: ChatRequest) -> TurnResult:
        """Render, plan the prompt ids, generate, record. `trajectory_id` None: an anonymous
        request, answered but not recorded (nobody could ever collect it)."""
        with self.in_flight.handling(trajectory_id):
            return await self._complete(trajectory_id, attempt, request)

    def end_trajectory(self, trajectory_id: str) -> int:
        """The trajectory's episode is over (its program exited or was killed): abort its engine
        requests still in flight, and refuse it further ones (in_flight.py says why). Called from
        the episode's thread; returns how many requests it aborted."""
        aborted = 0
        for rid, engine in self.in_flight.end(trajectory_id):
            try:
                engine.abort_request(rid)
                aborted += 1
            except EngineError as exc:  # the engine is gone: so is the request
                log.warning("could not abort %s's request %s on %s: %s", trajectory_id, rid, engine.base_url, exc)
        return aborted

    async def _complete(self, trajectory_id: str | None, attempt: str, request: ChatRequest) -> TurnResult:
        existing = self.store.get(trajectory_id) if trajectory_id is not None else None
        trajectory = existing or Trajectory(trajectory_id or "")
        plan = trajectory.plan(self._rendered(trajectory, request), attempt, self._tokenize)
        max_new_tokens = await self._max_new_tokens(len(plan.prompt_ids), request.sampling.max_tokens)
        if trajectory_id is not None:
            max_new_tokens = min(max_new_tokens, self._budget_left(trajectory))
        params = _sampling_params(request.sampling, self.cfg.sampling)
        top_logprobs = request.top_logprobs if request.logprobs else 0
        generation, engine_url = await self._generate(trajectory_id, plan.prompt_ids, params, max_new_tokens, top_logprobs)
        if generation.finish.get("type") == "abort" and not generation.output_ids:
            # Aborted on every resume before its first token: an answer to pass on would be an empty
            # success the agent cannot tell from a real (empty) reply.
            raise RouterError(
                503,
                f"engine {engine_url} aborted the request {len(generation.rids)} time(s) "
                f"before it produced a token ({generation.finish.get('message', 'no reason given')})",
            )
        parse = self.chat_format.parse_assistant if request.parse_tool_calls and request.tools else None
        turn, matched_stop = make_turn(plan, generation, self._decode, parse, engine_url)
        if trajectory_id is not None and existing is None:
            # Registered only once a turn exists, so a refused first request leaves no trace.
            trajectory = self.store.setdefault(trajectory_id, trajectory)
        branch = trajectory.record(plan, attempt, turn)
        trajectory.dropped_tools.update(request.dropped_tools)
        return TurnResult(
            content=turn.message.content,
            tool_calls=list(turn.message.tool_calls),
            finish_reason=_finish_reason(turn),
            prompt_tokens=len(turn.prompt_ids),
            completion_tokens=len(turn.output_ids),
            cached_tokens=generation.cached_tokens,
            token_logprobs=self._token_logprobs(generation) if request.logprobs else [],
            stop_sequence=matched_stop,
            branch=branch.index,
            turn=len(branch.turns) - 1,
            thinking=turn.thinking,
        )

    async def complete_choices(self, trajectory_id: str | None, attempt: str, request: ChatRequest) -> list[TurnResult]:
        """`request.n` replies sampled for one prompt, generated together. Each is recorded as a
        turn of its own: the first to finish extends the branch the prompt continues, the others
        begin branches (the agent goes on from whichever choice it picks). With a seed, choice i
        is sampled with seed + i: one seed n times would give n copies of one reply."""
        if request.n == 1:
            return [await self.complete(trajectory_id, attempt, request)]
        seed = request.sampling.seed
        choices = [
            replace(request, n=1, sampling=replace(request.sampling, seed=None if seed is None else _wrapped_int64(seed + i)))
            for i in range(request.n)
        ]
        tasks = [asyncio.ensure_future(self.complete(trajectory_id, attempt, choice)) for choice in choices]
        try:
            return list(await asyncio.gather(*tasks))
        except BaseException:
            for task in tasks:  # one choice failed: the request fails, so the rest stop generating
                task.cancel()
            raise

    def count_prompt_tokens(self, trajectory_id: str | None, attempt: str, request: ChatRequest) -> int:
        """The tokens `complete` would send as the prompt of this request (Anthropic's
        count_tokens): rendered and planned on the trajectory as it stands, nothing recorded."""
        trajectory = (self.store.get(trajectory_id) if trajectory_id is not None else None) or Trajectory(trajectory_id or "")
        return len(trajectory.plan(self._rendered(trajectory, request), attempt, self._tokenize).prompt_ids)

    def _rendered(self, trajectory: Trajectory, request: ChatRequest) -> str:
        """The prompt text: a legacy completion's as sent, else the messages (the trajectory's own
        replies as sampled) through the chat template."""
        if request.prompt_text is not None:
            return request.prompt_text
        tools = request.tools if request.parse_tool_calls else []
        return self.chat_format.render(trajectory.substitute_replies(request.messages), tools, request.thinking)

    def demonstrate(self, trajectory_id: str, body: dict) -> Trajectory:
        """An OpenAI chat request's assistant messages recorded as if the model had sampled them
        (each ending on the end-of-turn token), through the same rendering and prompt planning as
        `complete`: a warm start on demonstrations trains on exactly the tokens a rollout of the
        same conversation would. Nothing is stored and no engine is called."""
        _, request = parse_chat_completion({**body, "model": self.model_names[0]}, self.model_names)
        trajectory = Trajectory(trajectory_id)
        end_of_turn = self.tokenizer.eos_token_id
        for index, message in enumerate(request.messages):
            if message.role != "assistant":
                continue
            rendered = self.chat_format.render(trajectory.substitute_replies(request.messages[:index]), request.tools)
            plan = trajectory.plan(rendered, "demonstration", self._tokenize)
            text = assistant_text(message) if message.tool_calls else message.content
            ids = self._tokenize(text) + [end_of_turn]
            generation = Generation(
                output_ids=ids,
                logprobs=[0.0] * len(ids),
                versions=[UNVERSIONED] * len(ids),
                finish={"type": "stop", "matched": end_of_turn},
            )
            turn, _ = make_turn(plan, generation, self._decode, self.chat_format.parse_assistant if request.tools else None)
            trajectory.record(plan, "demonstration", turn)
        return trajectory

    def _budget_left(self, trajectory: Trajectory) -> int:
        """The tokens this trajectory may still generate; a RouterError (400, naming the bound) once
        it has had its turns or tokens (router.max_turns_per_trajectory, max_tokens_per_trajectory)."""
        turns, tokens = self.cfg.max_turns_per_trajectory, self.cfg.max_tokens_per_trajectory
        spent = ""
        if turns and trajectory.turns_generated >= turns:
            spent = f"{trajectory.turns_generated} model turns of router.max_turns_per_trajectory={turns}"
        elif tokens and trajectory.tokens_generated >= tokens:
            spent = f"{trajectory.tokens_generated} generated tokens of router.max_tokens_per_trajectory={tokens}"
        if spent:
            trajectory.budget_refusals += 1
            raise RouterError(400, f"trajectory {trajectory.id} has spent its budget ({spent}): its episode is over")
        return tokens - trajectory.tokens_generated if tokens else sys.maxsize

    def _tokenize(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def _decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens, clean_up_tokenization_spaces=False)

    async def _max_new_tokens(self, prompt_tokens: int, asked: int | None) -> int:
        """What the engine may generate: the request's max_tokens (unset: the run's
        rollout.max_new_tokens), cut to what the context has room for. A program that asks for more
        than fits (Claude Code always asks for 32000) gets a reply that ends where the context does,
        finish reason length; a prompt that leaves no room at all is a 400 with the numbers."""
        limit = await self._context_limit()
        room = limit - prompt_tokens
        if room <= 0:
            raise bad_request(
                f"this model's context limit is {limit} tokens and the messages take {prompt_tokens}: no room for a reply",
                "messages",
            )
        return min(self.cfg.sampling.max_new_tokens if asked is None else asked, room)

    async def _context_limit(self) -> int:
        if self._max_context is None:
            # One probe, however many first requests arrive together.
            if self._context_probe is None:
                self._context_probe = asyncio.ensure_future(self._engine_context_limit())
            try:
                self._max_context = await asyncio.shield(self._context_probe)
            except RouterError:
                self._context_probe = None  # let a later request ask again
                raise
        return self._max_context

    async def _engine_context_limit(self) -> int:
        """Read off whichever engine answers: they all serve the same model."""
        answered = ""

        async def server_info(engine: EngineClient) -> dict:
            nonlocal answered
            info = await asyncio.to_thread(engine.get_server_info)
            answered = engine.base_url
            return info

        try:
            info = await self.engines.call(None, server_info)
        except NoEngineAvailable as exc:
            raise RouterError(503, f"cannot read the engines' context limit: {exc}") from exc
        except EngineError as exc:
            raise RouterError(502, f"cannot read the context limit of engine {exc.url}: {exc}") from exc
        for key in ("max_context", "context_length", "max_total_num_tokens"):
            if isinstance(info.get(key), int) and info[key] > 0:
                return info[key]
        raise RouterError(502, f"engine {answered} does not report its context limit; set router max_context")

    async def _generate(
        self, trajectory_id: str | None, prompt_ids: list[int], params: dict, max_new: int, top_logprobs: int
    ) -> tuple[Generation, str]:
        """The generation, each call on the trajectory's engine or, when that one fails, another;
        and the base URL of the engine that gave the last answer (the turn records it).
        `top_logprobs`: the most likely tokens at each position too (0: none)."""
        answered = ""
        extra = {"top_logprobs_num": top_logprobs} if top_logprobs else {}
        if self.cfg.return_routed_experts:
            extra["return_routed_experts"] = True

        async def call(input_ids: list[int], sampling_params: dict, rid: str) -> dict:
            async def send(engine: EngineClient) -> dict:
                nonlocal answered
                with self.in_flight.request(trajectory_id, rid, engine):
                    response = await engine.agenerate(
                        input_ids=input_ids, sampling_params=sampling_params, return_logprob=True, rid=rid, **extra
                    )
                answered = engine.base_url
                return response

            with self.activity.request():
                return await _call_engine(self.engines, trajectory_id, send)

        generation = await generate_resumable(call, prompt_ids, params, max_new, self.cfg.max_resumes)
        return generation, answered

    def _token_logprobs(self, generation: Generation) -> list[TokenLogprob]:
        tops = generation.top_logprobs or [[] for _ in generation.output_ids]
        return [
            TokenLogprob(self._decode([token]), logprob, tuple((self._decode([t]), lp) for t, lp in top))
            for token, logprob, top in zip(generation.output_ids, generation.logprobs, tops)
        ]


def _sampling_params(s: Sampling, run: SamplingDefaults) -> dict:
    """The engine's sampling params: what the request set, else the run's sampling block (one
    block for single completions and agent episodes alike, white-box or black-box)."""
    params = {
        "temperature": _either(s.temperature, run.temperature),
        "top_p": _either(s.top_p, run.top_p),
        "top_k": _either(s.top_k, run.top_k),
        "sampling_seed": s.seed,
        "stop": list(s.stop) or None,
        "ignore_eos": s.ignore_eos,
    }
    return {k: v for k, v in params.items() if v is not None}


def _wrapped_int64(value: int) -> int:
    return (value - INT64_MIN) % 2**64 + INT64_MIN


def _either(asked, default):
    return default if asked is None else asked


async def _call_engine(pool: EnginePool, trajectory_id: str | None, send) -> dict:
    try:
        return await pool.call(trajectory_id, send)
    except NoEngineAvailable as exc:
        raise RouterError(503, str(exc)) from exc
    except EngineError as exc:
        if exc.status is not None and 400 <= exc.status < 500:
            raise RouterError(400, f"the engine refused the request: {exc.server_message}") from exc
        raise RouterError(502, f"engine failed: {exc}") from exc


def _roster(cfg: RouterConfig, roster: EngineRoster | None) -> EngineRoster | tuple[str, ...]:
    """The shared roster, which must list the engines the config names; else the config's URLs."""
    if roster is None:
        return cfg.engine_urls
    if [url.rstrip("/") for url in cfg.engine_urls] != roster.urls:
        raise ValueError(f"router engine_urls {list(cfg.engine_urls)} are not the shared roster's engines {roster.urls}")
    return roster


def _finish_reason(turn: Turn) -> str:
    if turn.message.tool_calls:
        return "tool_calls"
    return "stop" if turn.finish_reason == "stop" else "length"
