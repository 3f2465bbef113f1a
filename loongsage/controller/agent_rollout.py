"""Agent rollouts: every data item becomes `group_size` agent episodes, each in a fresh
sandbox, talking to the engines through the AgentFlow router; the router's recorded
trajectories (token in, token out) become the training samples.

A rollout source like CompletionRolloutSource: the pipeline hands it one item per group.

Before anything runs, SWE runs check their sandbox backend for real (a tool call and one
gold patch graded, tasks/swe/preflight.py) and refuse to start when it cannot grade; a batch
whose gradings all broke stops the run (grading_health.py).
"""

from __future__ import annotations

import functools
import logging
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

from loongsage.agentflow.agents import Agent, AgentResult, AgentTask, Endpoint, build_agent
from loongsage.agentflow.router import Router, RouterConfig, SamplingDefaults, to_samples
from loongsage.agentflow.router.server import RouterServer
from loongsage.agentflow.sandbox import SandboxError, SandboxLimits, create_sandbox
from loongsage.config import Config
from loongsage.config.data_mix import SINGLE_SOURCE
from loongsage.controller.data_stream import Item
from loongsage.controller.grading_health import check_grading, mark_grading_error
from loongsage.controller.live_sandboxes import LiveSandboxes
from loongsage.inference.fleet import EngineFleet
from loongsage.models import is_mixture_of_experts
from loongsage.sample import Sample
from loongsage.tasks.registry import Reward, get_reward
from loongsage.tasks.scoring import score_within
from loongsage.tasks.swe.preflight import sandbox_preflight
from loongsage.tasks.swe.reward import episode_reward as swe_episode_reward

log = logging.getLogger(__name__)
DEMONSTRATION_TRIES = 3


class AgentRolloutSource:
    def __init__(self, cfg: Config, engines: EngineFleet, model_path: str):
        self.cfg = cfg
        # Per data source (one unnamed source unless data.mix): its agent and its reward.
        self.agents, self.rewards = _agents_and_rewards(cfg)
        try:
            self.limits = SandboxLimits(**dict(cfg.agent.sandbox_limits))
        except (TypeError, SandboxError) as exc:
            raise ValueError(f"agent.sandbox_limits={dict(cfg.agent.sandbox_limits)}: {exc}") from None
        self.preflight()
        router = Router(
            RouterConfig(
                model=model_path,
                engine_urls=tuple(engines.urls),
                served_model_names=(cfg.model.name,),
                model_aliases=tuple(cfg.router.model_aliases),
                hosted_tools=cfg.router.hosted_tools,
                chat_format=cfg.agent.chat_format,
                max_context=cfg.rollout.max_context,
                request_timeout_s=cfg.rollout.request_timeout_s,
                sampling=run_sampling(cfg.rollout),
                return_routed_experts=is_mixture_of_experts(model_path),
                max_turns_per_trajectory=cfg.router.max_turns_per_trajectory,
                max_tokens_per_trajectory=cfg.router.max_tokens_per_trajectory,
            ),
            activity=engines.activity,
            # The engines' state shared with the controller: the router's requests and the weight
            # pushes see the same engines down or lagging.
            roster=engines.roster,
        )
        self.server = RouterServer(router)
        self.server.start()
        self._failures = 0  # episodes whose agent raised, over the run
        self._failures_lock = threading.Lock()
        self.pool = ThreadPoolExecutor(cfg.agent.max_concurrent, thread_name_prefix="agent-episode")
        self._live = LiveSandboxes()  # of episodes (and demonstrations) in flight

    def preflight(self) -> None:
        """When a data source is graded by the SWE reward: stop (PreflightError, with the fix)
        unless agent.sandbox runs a tool call and grades a gold patch on this machine."""
        if not any(_is_swe_reward(reward) for reward in self.rewards.values()):
            return
        log.info("%s", sandbox_preflight(self.cfg.agent.sandbox, limits=self.limits))

    def rollout_group(self, index: int, item: Item) -> list[Sample]:
        """One item's group of episodes; `index` counts groups over the run from 0 and names the
        trajectories `step<S>-g<G>-m<M>` (group G of the S-th batch)."""
        step, group = divmod(index, self.cfg.rollout.prompts_per_step)
        futures = [
            self.pool.submit(self._episode, f"step{step + 1}-g{group}", index, member, item)
            for member in range(self.cfg.rollout.group_size)
        ]
        samples = [sample for future in futures for sample in future.result()]
        check_grading(samples, self.cfg.agent.sandbox, f"prompt group {index}")
        return samples

    def demonstrations(self, items: list[Item]) -> list[Sample]:
        """Training samples of the items' demonstrations, replayed by the (first) agent in fresh
        sandboxes (agent.max_concurrent at once) and recorded by the router exactly as a rollout
        of them would be, in the items' order."""
        agent = next(iter(self.agents.values()))
        if not hasattr(agent, "demonstration"):
            raise ValueError(
                f"warm_start: agent {self.cfg.agent.name!r} cannot replay demonstrations "
                "(the tool agent, opencode and mini_swe_agent can)"
            )
        for item in items:
            if not item.data.get("demonstration"):
                raise ValueError(f"warm_start: item {item.id!r} carries no demonstration")

        def replay_once(item: Item) -> dict:
            with self._workspace(item) as sandbox:
                return agent.demonstration(self._task(item, sandbox), item.data["demonstration"], self.cfg.model.name)

        def replay(item: Item) -> dict:
            # A black-box program can crash once in a while (OpenCode's runtime did, once in ~40
            # replays here): each try gets a fresh sandbox, since a partial replay changed the tree.
            for attempt in range(1, DEMONSTRATION_TRIES):
                try:
                    return replay_once(item)
                except Exception as exc:
                    log.warning("demonstration %s failed (try %d of %d): %s", item.id, attempt, DEMONSTRATION_TRIES, exc)
            return replay_once(item)  # the last try's failure is the run's

        started, samples = time.perf_counter(), []
        futures = [self.pool.submit(replay, item) for item in items]
        for done, (item, future) in enumerate(zip(items, futures), start=1):
            trajectory = self.server.router.demonstrate(f"demo-{item.id}", future.result())
            samples.extend(to_samples(trajectory, mode=self.cfg.agent.export))
            elapsed = time.perf_counter() - started
            # Not a log record: progress, as the warm start's own updates print theirs.
            print(
                f"recording demonstrations {done}/{len(items)} | ETA {elapsed / done * (len(items) - done):.0f}s",
                file=sys.stderr,
                flush=True,
            )
        return samples

    def close(self) -> None:
        """The episodes in flight end first, their sandboxes destroyed (live_sandboxes.py says
        why), then the pool (nothing queued starts) and the router."""
        self._live.close()
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.server.stop()

    def _episode(self, name: str, group: int, member: int, item: Item) -> list[Sample]:
        trajectory_id = f"{name}-m{member}"
        result = self._run_agent(self.agents[item.source], trajectory_id, item)
        # A program killed mid-request leaves its generation running on the engine: it ends here.
        self.server.router.end_trajectory(trajectory_id)
        reward, info, error, timed_out = score_within(
            self.rewards[item.source], item.data, result, self.cfg.data.reward_timeout_s
        )
        if timed_out:  # its thread is left running in this process: said, so that a pile-up is seen
            log.warning("episode %s: %s (the reward's thread is left running)", trajectory_id, error)
        trajectory = self.server.router.store.pop(trajectory_id)
        samples = to_samples(trajectory, mode=self.cfg.agent.export) if trajectory is not None else []
        if not samples:
            log.warning("episode %s left no trajectory (%s: %s)", trajectory_id, result.exit_status, result.error)
        for sample in samples:
            sample.reward, sample.group_id, sample.label = reward, group, item.label
            sample.prompt_text = item.prompt_text
            sample.metadata.update(
                item_id=item.id,
                exit_status=result.exit_status,
                # Counted by the router, which sees every model call of a black-box program too.
                episode_turns=sum(len(branch.turns) for branch in trajectory.branches),
                episode_branches=len(trajectory.branches),
                hosted_tools_dropped=dict(trajectory.dropped_tools),
                budget_refusals=trajectory.budget_refusals,
                reward_info=info,
                agent_log=result.log[-8:],
                source=item.source,
            )
            if error is not None:
                sample.metadata["reward_error"] = error
            if timed_out:
                sample.metadata["reward_timed_out"] = True
            mark_grading_error(sample, info)
        return samples

    @contextmanager
    def _workspace(self, item: Item):
        """A fresh sandbox holding the item's task files, when it has a task with files; known
        while it lives, so that `close` can end it."""
        files = getattr(item.data.get("task"), "files", None)
        if files is None:
            yield None
            return
        with create_sandbox(files, self.cfg.agent.sandbox, self.limits) as sandbox, self._live.holding(sandbox):
            yield sandbox

    def _task(self, item: Item, sandbox) -> AgentTask:
        return AgentTask(
            item.id, item.prompt_text, sandbox, dict(item.data.get("metadata") or {}), system_prompt=item.system_prompt
        )

    def _run_agent(self, agent: Agent, trajectory_id: str, item: Item) -> AgentResult:
        endpoint = Endpoint(self.server.url_for(trajectory_id), self.server.router.key_for(trajectory_id), self.cfg.model.name)
        try:
            with self._workspace(item) as sandbox:
                return agent.run(self._task(item, sandbox), endpoint)
        except Exception as exc:  # one broken episode costs its reward, not the run
            # The first failure's traceback says where; the rest (often the same cause, e.g. an
            # engine that died under every episode in flight) get a line each.
            with self._failures_lock:
                self._failures += 1
                first = self._failures == 1
            log.error("agent episode %s failed: %s: %s", trajectory_id, type(exc).__name__, exc, exc_info=first)
            return AgentResult(exit_status="error", error=f"{type(exc).__name__}: {exc}")


def _agents_and_rewards(cfg: Config) -> tuple[dict[str, Agent], dict[str, Reward]]:
    if not cfg.data.mix:
        return (
            {SINGLE_SOURCE: build_agent(cfg.agent.name, dict(cfg.agent.options))},
            {SINGLE_SOURCE: _episode_reward(cfg, cfg.data.reward)},
        )
    agents, rewards = {}, {}
    for entry in cfg.data.mix:
        agent_name = entry.agent or cfg.agent.name
        options = dict(entry.agent_options) if entry.agent else {**cfg.agent.options, **entry.agent_options}
        agents[entry.name] = build_agent(agent_name, options)
        rewards[entry.name] = _episode_reward(cfg, entry.reward or cfg.data.reward)
    return agents, rewards


def _episode_reward(cfg: Config, name: str) -> Reward:
    """The reward by name; SWE patches are graded on the run's own sandbox backend, the one
    the preflight checked (and the one `agent.sandbox=...` changes)."""
    reward = get_reward(name)
    return functools.partial(reward, backend=cfg.agent.sandbox) if reward is swe_episode_reward else reward


def _is_swe_reward(reward: Reward) -> bool:
    return getattr(reward, "func", reward) is swe_episode_reward


def run_sampling(rollout) -> SamplingDefaults:
    """The run's one sampling block (rollout.*), which the router applies to every episode's
    requests that do not set their own (agent options may override it)."""
    return SamplingDefaults(
        temperature=rollout.temperature, top_p=rollout.top_p, top_k=rollout.top_k, max_new_tokens=rollout.max_new_tokens
    )
