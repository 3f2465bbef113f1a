"""RolloutGroup: the inference engines (Ray actors serving SGLang's HTTP protocol) and the
code that turns prompts into sampled `Sample`s through them."""

from __future__ import annotations

import asyncio
import random
import threading
from contextlib import contextmanager
from functools import cached_property

import ray

from loongsage.cluster.actor_placement import check_one_per_actor
from loongsage.config import RolloutConfig
from loongsage.controller.data_stream import Item
from loongsage.controller.engine_failure import dead_engines
from loongsage.controller.request_loop import RequestLoop
from loongsage.inference.activity import ActivityMeter
from loongsage.inference.client import EngineClient
from loongsage.inference.resumable import generate_resumable
from loongsage.sample import Sample

ENGINE_STOP_TIMEOUT_S = 10.0
MAX_RESUMES = 64  # weight updates one response may live through; the staleness window drops it long before


class RolloutGroup:
    def __init__(
        self, cfg: RolloutConfig, model_path: str, cpus: list[list[int]] | None = None, ray_options: list[dict] | None = None
    ):
        """`cpus`: the cores of each engine (disaggregated placement on this machine); None: all cores.
        `ray_options`: each engine's Ray actor options (its placement-group seat); None: Ray's defaults."""
        from loongsage.inference.engines import engine_actor

        engine = engine_actor(cfg.engine)

        check_one_per_actor(cpus, cfg.num_engines, "RolloutGroup cpus", "rollout.num_engines")
        check_one_per_actor(ray_options, cfg.num_engines, "RolloutGroup ray_options", "rollout.num_engines")

        self.cfg = cfg
        self.model_path = model_path
        engine_cfg = {
            "max_running": cfg.max_running,
            "max_context": cfg.max_context,
            "num_threads": cfg.num_threads,
            "dtype": cfg.dtype,
            # Versions count trainer steps; the starting weights are version 0.
            "weight_version": "0",
        }
        self.actors = [
            engine.options(**(ray_options[i] if ray_options else {})).remote(
                model_path, {**engine_cfg, "num_threads": len(cpus[i]) if cpus else cfg.num_threads}, cpus[i] if cpus else None
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
    def clients(self) -> list[EngineClient]:
        return [EngineClient(url, timeout=self.cfg.request_timeout_s) for url in self.urls]

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
        `interrupt` what is in flight is aborted (its partial output returns to the caller, who
        continues it after the update); the engines continue once the block is done. Without
        `interrupt` the caller must have nothing in flight, or responses would mix versions."""
        with self.activity.paused():
            for client in self.clients:
                client.pause_generation()
            try:
                if interrupt:
                    for client in self.clients:
                        client.abort_request(abort_all=True)
                yield
            finally:
                for client in self.clients:
                    client.continue_generation()

    def shutdown(self) -> None:
        """Engines stop first, so requests in flight end; a rollout thread still waiting on one
        then gets RequestLoopClosed rather than waiting forever."""
        stopping = [actor.stop.remote() for actor in self.actors]
        for actor, stopped in zip(self.actors, stopping):
            try:
                ray.get(stopped, timeout=ENGINE_STOP_TIMEOUT_S)
            except ray.exceptions.RayActorError:
                pass  # already dead: nothing to stop (the run says which engine died)
            except ray.exceptions.GetTimeoutError:
                ray.kill(actor)  # hung (or stopped by a debugger): it must not hold the run's exit
        self._requests.close(last=self._close_clients())

    def dead_engines(self) -> list[str]:
        """The engines whose actor is gone, named for the message that stops the run."""
        return dead_engines(self.actors, self.__dict__.get("urls", []))

    def _run(self, coroutine):
        return self._requests.run(coroutine)

    async def _close_clients(self) -> None:
        for client in self.__dict__.get("clients", []):  # never started: nothing to close
            await client.aclose()

    async def _group(self, item: Item, prompt_text: str, prompt_ids: list[int], index: int, seed_key: str) -> list[Sample]:
        # A whole group goes to one engine, so its prompt cache prefills the prompt once.
        client = self.clients[index % len(self.clients)]
        jobs = []
        for member in range(self.cfg.group_size):
            request_seed = random.Random(f"rollout:{seed_key}:{member}").getrandbits(31)
            jobs.append(self._sample(client, item, prompt_text, prompt_ids, index, request_seed))
        return list(await asyncio.gather(*jobs))

    async def _sample(
        self, client: EngineClient, item: Item, prompt_text: str, prompt_ids: list[int], index: int, request_seed: int
    ) -> Sample:
        sampling_params = {
            "temperature": self.cfg.temperature,
            "top_p": self.cfg.top_p,
            "top_k": self.cfg.top_k,
            "sampling_seed": request_seed,
        }

        async def call(input_ids: list[int], params: dict, rid: str) -> dict:
            with self.activity.request():
                return await client.agenerate(input_ids=input_ids, sampling_params=params, return_logprob=True, rid=rid)

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
