"""RolloutGroup: the inference engines (Ray actors serving SGLang's HTTP protocol) and the
code that turns prompts into sampled `Sample`s through them."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import threading
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property

import ray

from loongsage.cluster.actor_placement import check_one_per_actor
from loongsage.config import RolloutConfig
from loongsage.controller.data_stream import Item
from loongsage.controller.engine_failure import dead_engines, engine_restarts
from loongsage.controller.request_loop import RequestLoop
from loongsage.inference.activity import ActivityMeter
from loongsage.inference.client import EngineClient, EngineError
from loongsage.inference.engine_pool import EnginePool
from loongsage.inference.engine_roster import EngineRoster
from loongsage.inference.resumable import generate_resumable
from loongsage.sample import Sample
from loongsage.transfer.rounds import RoundReport

log = logging.getLogger(__name__)

ENGINE_STOP_TIMEOUT_S = 10.0
MEMORY_TAGS = ("weights", "kv_cache")  # what a colocated engine frees while the trainer steps
MAX_RESUMES = 64  # weight updates one response may live through; the staleness window drops it long before


@dataclass(frozen=True)
class EngineSeats:
    """Where the engines sit, as the SGLang actor's launch flags need it: each engine's devices
    (None: not partitioned; node rank 0's for an engine spanning nodes), its further nodes,
    devices per engine, shared with the trainer or not, its log dir."""

    gpus: list[list[int]] | None = None
    followers: list[list[dict]] | None = None  # ActorPlacement.engine_followers
    tp: int = 1
    colocated: bool = False
    log_dir: str | None = None


class RolloutGroup:
    def __init__(
        self,
        cfg: RolloutConfig,
        model_path: str,
        cpus: list[list[int]] | None = None,
        ray_options: list[dict] | None = None,
        seats: EngineSeats = EngineSeats(),
    ):
        """`cpus`: the cores of each engine (disaggregated placement on this machine); None: all cores.
        `ray_options`: each engine's Ray actor options (its placement-group seat); None: Ray's defaults."""
        from loongsage.inference.engines import engine_actor

        engine = engine_actor(cfg.engine)

        check_one_per_actor(cpus, cfg.num_engines, "RolloutGroup cpus", "rollout.num_engines")
        check_one_per_actor(ray_options, cfg.num_engines, "RolloutGroup ray_options", "rollout.num_engines")
        check_one_per_actor(seats.gpus, cfg.num_engines, "RolloutGroup seats.gpus", "rollout.num_engines")
        if any(seats.followers or []) and cfg.engine != "sglang":
            raise ValueError(
                f"roles.rollout.tp={seats.tp} spans nodes, which only rollout.engine=sglang runs (one server per node); "
                f"rollout.engine={cfg.engine!r} runs on one node: lower roles.rollout.tp to a node's GPUs"
            )

        self.cfg = cfg
        self.model_path = model_path
        self.colocated = seats.colocated
        self.actors = [
            engine.options(**(ray_options[i] if ray_options else {})).remote(
                model_path, engine_cfg(cfg, i, cpus[i] if cpus else None, seats), cpus[i] if cpus else None
            )
            for i in range(cfg.num_engines)
        ]
        # Engines load their weights while the caller goes on (e.g. to start the trainer).
        self._started = [actor.start.remote() for actor in self.actors]
        self.activity = ActivityMeter()
        self._tokenizer_lock = threading.Lock()
        self._requests = RequestLoop("rollout-requests")

    @cached_property
    def urls(self) -> list[str]:
        return ray.get(self._started)

    @cached_property
    def roster(self) -> EngineRoster:
        """Shared with the router: which engines answer and hold the published weights."""
        return EngineRoster(self.urls)

    @cached_property
    def clients(self) -> list[EngineClient]:
        return [EngineClient(url, timeout=self.cfg.request_timeout_s) for url in self.urls]

    @cached_property
    def _pool(self) -> EnginePool:
        return EnginePool(self.roster, self.cfg.request_timeout_s)

    def generate_group(self, item: Item, index: int, seed: int) -> list[Sample]:
        """`group_size` samples of the `index`-th group of the run (counting from 0), each request
        seeded by (seed, step, group in step, member), so a group samples the same whatever the
        run mode and however many groups run beside it. Callable from any thread."""
        step, group_in_step = divmod(index, self.cfg.prompts_per_step)
        # One thread at a time: a fast tokenizer's call reconfigures its Rust backend (padding and
        # truncation), which raises "Already borrowed" when another thread is inside it.
        with self._tokenizer_lock:
            prompt_text = self._tokenizer.apply_chat_template(item.messages, add_generation_prompt=True, tokenize=False)
            prompt_ids = self._tokenizer(prompt_text, add_special_tokens=False)["input_ids"]
        return self._run(self._group(item, prompt_text, prompt_ids, index, f"{seed}:{step + 1}:{group_in_step}"))

    @contextmanager
    def weight_update(self, interrupt: bool):
        """Around pushing new weights while generation may be in flight: engines pause, and with
        `interrupt` what is in flight is aborted (pause mode "abort": its partial output returns
        to the caller, who continues it after the update); the engines continue once the block is
        done. Without `interrupt` the pause holds requests in place, so the caller must have
        nothing in flight, or responses would mix versions (and SGLang refuses to flush its cache).
        An engine that does not answer is skipped: it is down, and gets the weights once back."""
        mode = "abort" if interrupt else "in_place"
        with self.activity.paused():
            self._each_answering(lambda client: client.pause_generation(mode=mode))
            try:
                yield
            finally:
                self._each_answering(lambda client: client.continue_generation())

    def push_weights(self, push: Callable[[list[str]], RoundReport], version: int) -> dict[str, float]:
        """`push(urls)` loads the trainer's weights, `version`, into the engines that answer and
        reports which hold it (`TrainGroup.push_weights`); the ones that do not (restarting, or
        failed twice) are out of rotation and pushed to by `resync` once they answer. One more
        push when an engine dies during this one: the others must not keep the old weights.
        Returns the transfer metrics."""
        urls = self.roster.answering()
        try:
            report = push(urls)
        except Exception:
            self._mark_unreachable(urls)
            still = self.roster.answering()
            if still == urls:
                raise
            log.warning("an engine died during the weight push of version %d; pushing again to %s", version, still)
            report = push(still)
        self._publish(version, report)
        return report.metrics

    def resync(self, push: Callable[[list[str]], RoundReport]) -> list[str]:
        """Give engines that came back without the published weights (a restarted process serves
        the base model) those weights; the trainer must hold exactly the published version.
        Returns the engines pushed to."""
        urls = self.roster.needing_weights()
        if urls:
            log.info("pushing weights of version %d to restarted engine(s) %s", self.roster.published(), ", ".join(urls))
            self._publish(self.roster.published(), push(urls))
        return urls

    def _publish(self, version: int, report: RoundReport) -> None:
        """Only engines that hold `version` serve it; a push that failed on every engine it tried
        stops the run (one to no engine, all being down, waits for them to come back)."""
        for url, why in report.failed.items():
            log.error(
                "engine %s did not get weight version %d (%s): out of rotation until a later push reaches it", url, version, why
            )
        if report.failed and not report.updated:
            raise RuntimeError(f"the weight push of version {version} reached no engine: {report.failed}")
        self.roster.publish(version, report.updated)

    def release_memory(self) -> None:
        """Colocated engines free their weights and KV cache while the trainer steps on the same
        devices (nothing may be in flight); `memory_resumed_for_push` brings it back. Disaggregated
        engines keep theirs."""
        if self.colocated:
            self._each_answering(lambda client: client.release_memory_occupation(list(MEMORY_TAGS)))

    @contextmanager
    def memory_resumed_for_push(self):
        """Around a weight push: the weights' memory is back before the push writes into it, the KV
        cache only after it, so the trainer's memory and the engines' caches are not needed at once.
        (Resuming what was not released does nothing.)"""
        if self.colocated:
            self._each_answering(lambda client: client.resume_memory_occupation(["weights"]))
        yield
        if self.colocated:
            self._each_answering(lambda client: client.resume_memory_occupation(["kv_cache"]))

    def shutdown(self) -> None:
        """Engines stop first, so requests in flight end; a rollout thread still waiting on one
        then gets RequestLoopClosed rather than waiting forever, and a router request
        NoEngineAvailable rather than waiting for the engine to come back."""
        if "roster" in self.__dict__:
            self.roster.close()
        stop_engines(self.actors)
        self._requests.close(last=self._close_clients())

    def dead_engines(self) -> list[str]:
        """The engines that are gone for good (actor dead, or restarts exhausted), named for the
        message that stops the run."""
        return dead_engines(self.actors, self.__dict__.get("urls", []))

    def restarts(self) -> int:
        """Engine process restarts over the run, all engines together."""
        return engine_restarts(self.actors)

    def _each_answering(self, call: Callable[[EngineClient], object]) -> None:
        for client in self.clients:
            if client.base_url in self.roster.answering():
                try:
                    call(client)
                except EngineError as exc:
                    if exc.status is not None:
                        raise
                    self.roster.mark_down(self.clients.index(client), str(exc))

    def _mark_unreachable(self, urls: list[str]) -> None:
        for index, client in enumerate(self.clients):
            if client.base_url in urls and not client.health():
                self.roster.mark_down(index, "no answer to /health after a failed weight push")

    def _run(self, coroutine):
        return self._requests.run(coroutine)

    async def _close_clients(self) -> None:
        if "_pool" in self.__dict__:
            await self._pool.aclose()
        for client in self.__dict__.get("clients", []):  # never started: nothing to close
            await client.aclose()

    async def _group(self, item: Item, prompt_text: str, prompt_ids: list[int], index: int, seed_key: str) -> list[Sample]:
        # A whole group goes to one engine (the pool's affinity on its index), so its prompt
        # cache prefills the prompt once.
        jobs = []
        for member in range(self.cfg.group_size):
            request_seed = random.Random(f"rollout:{seed_key}:{member}").getrandbits(31)
            jobs.append(self._sample(item, prompt_text, prompt_ids, index, request_seed))
        try:
            return list(await asyncio.gather(*jobs))
        finally:
            self._pool.forget(index)

    async def _sample(self, item: Item, prompt_text: str, prompt_ids: list[int], index: int, request_seed: int) -> Sample:
        sampling_params = {
            "temperature": self.cfg.temperature,
            "top_p": self.cfg.top_p,
            "top_k": self.cfg.top_k,
            "sampling_seed": request_seed,
        }

        async def call(input_ids: list[int], params: dict, rid: str) -> dict:
            with self.activity.request():
                return await self._pool.call(
                    index,
                    lambda client: client.agenerate(input_ids=input_ids, sampling_params=params, return_logprob=True, rid=rid),
                )

        generation = await generate_resumable(call, list(prompt_ids), sampling_params, self.cfg.max_new_tokens, MAX_RESUMES)
        response_ids = generation.output_ids
        return Sample(
            prompt_ids=list(prompt_ids),
            response_ids=response_ids,
            response_logprobs=generation.logprobs,
            loss_mask=[1] * len(response_ids),
            weight_versions=generation.versions,
            group_id=index,
            finish_reason=generation.finish.get("type", "stop"),
            prompt_text=prompt_text,
            # One call's text is the whole response unless it was resumed; then decode the ids.
            response_text=generation.text if not generation.resumes else self._decode(response_ids),
            label=item.label,
            metadata={"item_id": item.id, "resumes": generation.resumes},
        )

    @cached_property
    def _tokenizer(self):
        from loongsage.models import load_tokenizer

        return load_tokenizer(self.model_path)

    def _decode(self, ids: list[int]) -> str:
        with self._tokenizer_lock:
            return self._tokenizer.decode(ids, skip_special_tokens=True)


def stop_engines(actors: list) -> None:
    """Stop every engine actor at once, waiting a bounded time for each."""
    stopping = [actor.stop.remote() for actor in actors]
    for actor, stopped in zip(actors, stopping):
        try:
            ray.get(stopped, timeout=ENGINE_STOP_TIMEOUT_S)
        except ray.exceptions.RayActorError:
            pass  # already dead: nothing to stop (the run says which engine died)
        except ray.exceptions.GetTimeoutError:
            ray.kill(actor)  # hung (or stopped by a debugger): it must not hold the run's exit


def engine_cfg(
    cfg: RolloutConfig,
    index: int,
    cpus: list[int] | None,
    seats: EngineSeats,
    weight_version: str = "0",
    seat: int | None = None,
) -> dict:
    """One engine's settings: the serving limits every engine takes, and for the SGLang actor
    its launch settings (the other engines have no devices, ports or processes of their own).
    `index` names the engine's ports and log; `seat`: its entry of `seats` (default `index`);
    `weight_version`: what its starting weights carry (a rollout engine's 0, a teacher's name)."""
    seat = index if seat is None else seat
    engine_cfg = {
        "max_running": cfg.max_running,
        "max_context": cfg.max_context,
        "num_threads": len(cpus) if cpus else cfg.num_threads,
        "dtype": cfg.dtype,
        "weight_version": weight_version,
    }
    if cfg.engine == "sglang":
        sglang = cfg.sglang if isinstance(cfg.sglang, dict) else dataclasses.asdict(cfg.sglang)
        gpus = seats.gpus[seat] if seats.gpus else None
        engine_cfg["sglang"] = {
            **sglang,
            "index": index,
            "tp": seats.tp,
            "gpus": gpus,
            "followers": seats.followers[seat] if seats.followers else [],
            "colocated": seats.colocated,
            "log_dir": seats.log_dir,
        }
    return engine_cfg
