"""Controller-side handle on the train workers: one Ray actor per trainer rank."""

from __future__ import annotations

from pathlib import Path

import ray

from loongsage.cluster.actor_placement import check_one_per_actor
from loongsage.sample import Sample
from loongsage.training.backends import train_backend
from loongsage.training.batch import check_samples, split_even
from loongsage.training.checkpoint_dir import atomic_dir
from loongsage.training.data_parallel import DataLayout, data_layout
from loongsage.training.errors import TrainerError
from loongsage.training.objective import check_off_policy_inputs
from loongsage.training.settings import (
    algo_settings,
    data_parallel_key,
    data_parallel_size,
    train_ranks,
    train_ranks_named,
    trainer_settings,
)
from loongsage.transfer.rounds import RoundReport, run_update_round
from loongsage.transfer.routes import Plan
from loongsage.transfer.weight_routes import local_plan

# How long a rank's failure waits for its peers before it is reported as the cause: Ray marks a
# killed actor dead within a second or two of its survivors' broken collective.
PEER_DEATH_GRACE_S = 10.0


class TrainGroup:
    """Runs `train_ranks(trainer)` actors of the `trainer.backend` worker class as one trainer: every
    batch splits into `data_parallel_size(trainer)` shards, each rank trains on the shard of its
    `data_rank()` (fsdp: world_size ranks, each its own shard; megatron: tp * pp * dp ranks, dp shards).

    Ray must already be initialized (see `loongsage.cluster.actor_placement.place_actors`).
    """

    def __init__(
        self,
        model_path: str,
        cfg,
        algo,
        seed: int,
        ray_options: list[dict] | None = None,
        cpus: list[list[int]] | None = None,
        spares: bool = False,
        adopt: list | None = None,
    ):
        """`ray_options`: each rank's Ray actor options (its placement-group seat); None: `trainer.num_threads`
        CPUs each, wherever Ray likes. `cpus`: the cores of each rank (disaggregated placement on this
        machine); None: all cores. `spares`: a spare process per rank for the group that replaces
        this one (`start_spares`, `take_spares`). `adopt`: such spares, which this group's ranks
        run in instead of new processes."""
        self.trainer = trainer_settings(cfg)
        self.algo = algo_settings(algo)
        self.step = 0
        self._broken: str | None = None
        self._broken_by_death = False
        ranks, (ranks_key, _) = train_ranks(self.trainer), train_ranks_named(self.trainer)
        check_one_per_actor(ray_options, ranks, "TrainGroup ray_options", ranks_key)
        check_one_per_actor(cpus, ranks, "TrainGroup cpus", ranks_key)
        check_one_per_actor(adopt, ranks, "TrainGroup adopt", ranks_key)
        if spares and any(options.get("num_gpus") for options in ray_options or []):
            raise ValueError("TrainGroup spares are for CPU ranks: a spare cannot hold its seat's GPU while its rank lives")
        self._rank_args, self._ray_options, self._cpus = (str(model_path), seed), ray_options, cpus
        self.spares: list = []
        self._wants_spares = spares
        self.workers = self._spares_alive(adopt) if adopt else self._start_ranks()
        (address,) = self._gather("rendezvous_address", [self.workers[0].rendezvous_address.remote()])
        self._call_all("setup", *address)
        self.pids: list[int] = self._call_all("pid")
        self.layout = self._data_layout()
        # The sources a route plan may use: rank -> host of each rank that holds a full replica
        # once a push has gathered the weights.
        self.weight_sources = {rank: host for rank, host in enumerate(self._call_all("weight_source")) if host}
        self.weight_plan: Plan | None = None

    def start_spares(self) -> None:
        """Starts the spare processes asked for (`spares`), unless they are running. Called by the
        driver once a step is done: their imports take seconds of CPU, which would slow this
        group's own start, or the restart, if they began with it. They hold no resources: each
        rank's seat stays its rank's until that rank dies."""
        if not self._wants_spares or self.spares:
            return
        self.spares = self._start_ranks(num_cpus=0)
        for spare in self.spares:
            spare.warm_up.remote()  # `_spares_alive`'s first call waits for it

    def train_step(self, samples: list[Sample], policy_version: int | None = None) -> dict[str, float]:
        """`policy_version`: the weight version the trainer's weights are (read by
        algorithm.proximal=interpolate)."""
        # Checked here too: a worker that raises would take the whole group down with it.
        check_off_policy_inputs(samples, self.algo, policy_version)
        metrics = self._step_on_shards("train_step", samples, policy_version)
        self.step += 1
        return metrics

    def supervised_step(self, samples: list[Sample], lr: float) -> dict[str, float]:
        return self._step_on_shards("supervised_step", samples, lr)

    def compute_logprobs(self, samples: list[Sample]) -> list[list[float]]:
        return self._per_token_on_shards("compute_logprobs", samples)

    def compute_values(self, samples: list[Sample]) -> list[list[float]]:
        """The critic's value of every response token (algorithm.advantage=gae)."""
        return self._per_token_on_shards("compute_values", samples)

    def save_checkpoint(self, path: str | Path) -> None:
        with atomic_dir(path) as scratch:
            self._call_all("save_checkpoint", str(scratch))

    def load_checkpoint(self, path: str | Path) -> None:
        self.step = self._call_all("load_checkpoint", str(Path(path).resolve()))[0]

    def set_weight_plan(self, plan: Plan | None) -> None:
        """The route plan every later push follows; None: each push plans for this machine
        (`weight_routes.local_plan`, as a trainer driven without a controller does)."""
        self.weight_plan = plan

    def push_weights(self, engine_urls: list[str], version: int) -> RoundReport:
        """One update round, coordinated from here (`rounds.run_update_round`): every rank gathers
        the weights, the plan's sources send their routes at once, and the engines that got all of
        theirs switch to `version`."""
        urls = list(engine_urls)
        plan = self.weight_plan or self._local_plan(urls)
        routes = plan.to_dict()

        def send(skip: list[str]) -> list:
            refs = [worker.push_weights.remote(routes, urls, skip) for worker in self.workers]
            return [report for report in self._gather("push_weights", refs) if report is not None]

        return run_update_round(plan, urls, version, send)

    def _local_plan(self, engine_urls: list[str]) -> Plan:
        """This machine's plan, with the sources that run on it (the first source's host)."""
        if not self.weight_sources:
            raise TrainerError("no trainer rank holds the full weights to push: weight_source() answered None on every rank")
        host = self.weight_sources[min(self.weight_sources)]
        ranks = [rank for rank, where in self.weight_sources.items() if where == host]
        return local_plan(engine_urls, self.trainer.weight_sync, host, ranks)

    def check_alive(self) -> None:
        """A TrainerError naming the rank when one's process is gone. For a caller with nothing for
        the ranks to do (waiting for a batch), so that a death is seen within seconds, not at the
        next training call; a rank answers it at once when idle."""
        self._gather("the wait for a batch", [worker.data_rank.remote() for worker in self.workers])

    def take_spares(self) -> list:
        """The spare processes, for the group that replaces this one (and no longer this group's
        to end); [] without spares."""
        spares, self.spares = self.spares, []
        return spares

    def shutdown(self) -> None:
        self._end_ranks()
        for spare in self.take_spares():
            ray.kill(spare)

    def _start_ranks(self, **options) -> list:
        """One actor per rank of the `trainer.backend` worker class, constructed with the rank's
        arguments; `options` over each rank's own Ray options."""
        actor = ray.remote(train_backend(self.trainer.backend))
        (model_path, seed), ray_options, cpus = self._rank_args, self._ray_options, self._cpus
        return [
            # A seat's num_cpus (its share of the bundle's one CPU) replaces num_threads: an actor
            # asking for more than its bundle holds would never be scheduled.
            actor.options(
                **{"num_cpus": self.trainer.num_threads, **(ray_options[rank] if ray_options else {}), **options}
            ).remote(model_path, self.trainer, self.algo, seed, rank, cpus[rank] if cpus else None)
            for rank in range(train_ranks(self.trainer))
        ]

    def _spares_alive(self, spares: list) -> list:
        """`spares` once each answers (its imports done); new processes instead if one is gone."""
        try:
            ray.get([spare.pid.remote() for spare in spares])
            return spares
        except ray.exceptions.RayActorError:
            for spare in spares:
                ray.kill(spare)
            return self._start_ranks()

    def _end_ranks(self) -> None:
        for worker in self.workers:
            ray.kill(worker)
        self.workers = []

    def _data_layout(self) -> DataLayout:
        answers = self._call_all("data_rank")
        size = data_parallel_size(self.trainer)
        try:
            return data_layout(answers, size, f"{data_parallel_key(self.trainer)}={size}")
        except TrainerError as err:
            self._fail(str(err), err)

    def _step_on_shards(self, method: str, samples: list[Sample], *args) -> dict[str, float]:
        shards = self.layout.per_rank(self._shard(samples))
        refs = [getattr(w, method).remote(s, *args) for w, s in zip(self.workers, shards)]
        per_rank = self._gather(method, refs)
        # Every rank returns the global metrics (all-reduced over the data-parallel group).
        return {key: sum(m[key] for m in per_rank) / len(per_rank) for key in per_rank[0]}

    def _per_token_on_shards(self, method: str, samples: list[Sample]) -> list[list[float]]:
        """One list per sample, in order, from every shard's rank."""
        shards = self.layout.per_rank(self._shard(samples))
        refs = [getattr(w, method).remote(s) for w, s in zip(self.workers, shards)]
        per_shard = self.layout.per_shard(self._gather(method, refs))
        return [values for shard in per_shard for values in shard]

    def _shard(self, samples: list[Sample]) -> list[list[Sample]]:
        """One shard per data-parallel index, in order."""
        check_samples(samples)
        size, key = data_parallel_size(self.trainer), data_parallel_key(self.trainer)
        shards = split_even(list(samples), size, key)
        per_shard, minis = len(shards[0]), self.trainer.mini_batches
        if per_shard % minis:
            raise ValueError(
                f"each data-parallel shard gets {per_shard} samples ({len(samples)} / {key}="
                f"{size}), which does not divide into trainer.mini_batches={minis}"
            )
        return shards

    def _call_all(self, method: str, *args) -> list:
        return self._gather(method, [getattr(w, method).remote(*args) for w in self.workers])

    def _gather(self, call: str, refs: list) -> list:
        """Results in rank order. The first rank to die or fail ends the whole group:
        its peers may be blocked in a collective waiting for it and would never return."""
        if self._broken:
            raise TrainerError(f"the train group is unusable: {self._broken}", died=self._broken_by_death)
        results = [None] * len(refs)
        pending = {ref: rank for rank, ref in enumerate(refs)}
        while pending:
            (ready,), _ = ray.wait(list(pending), num_returns=1)
            rank = pending.pop(ready)
            try:
                results[rank] = ray.get(ready)
            except ray.exceptions.RayActorError as err:
                self._fail(f"train worker rank {rank} died during {call} at trainer step {self.step}", err, died=True)
            except ray.exceptions.RayTaskError as err:
                self._fail_on_root_cause(call, rank, err, pending)
        return results

    def _fail_on_root_cause(self, call: str, rank: int, err, pending: dict) -> None:
        """A rank whose collective broke ("connection reset by peer") often reports before Ray
        notices the peer that died and broke it; the dead peer is the cause worth naming."""
        done, _ = ray.wait(list(pending), num_returns=len(pending), timeout=PEER_DEATH_GRACE_S)
        for ref in done:
            try:
                ray.get(ref)
            except ray.exceptions.RayActorError as death:
                message = f"train worker rank {pending[ref]} died during {call} at trainer step {self.step}"
                self._fail(message, death, died=True)
            except ray.exceptions.RayTaskError:
                pass
        self._fail(f"train worker rank {rank} failed in {call} at trainer step {self.step}: {err.cause!r}", err)

    def _fail(self, message: str, err: Exception, died: bool = False) -> None:
        self._broken, self._broken_by_death = message, died
        self._end_ranks()  # the spares are the next group's (take_spares), or ended by shutdown()
        raise TrainerError(message, died=died) from err
