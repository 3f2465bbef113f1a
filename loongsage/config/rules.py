"""Cross-field rules, checked before anything starts; every message names its fields."""

from __future__ import annotations

from dataclasses import fields

from loongsage.algorithms.advantages import GROUP_RELATIVE
from loongsage.algorithms.losses import AGGREGATION_MODES, KL_KINDS
from loongsage.algorithms.off_policy import IS_LEVELS, IS_MODES
from loongsage.algorithms.stale_filters import STALE_FILTERS
from loongsage.algorithms.staleness_windows import build_window
from loongsage.config.algorithm_rules import algorithm_problems
from loongsage.config.container import RUNTIMES, container_problems
from loongsage.config.data_mix import mix_shares
from loongsage.config.owned_choices import OwnedChoices, choice_problems
from loongsage.config.parallel import (
    MEGATRON,
    MEGATRON_RANKS,
    MOE_SETTINGS_BACKENDS,
    data_parallel_key,
    data_parallel_size,
    expert_parallel_problem,
    train_ranks,
    train_ranks_named,
    uses_megatron,
)
from loongsage.config.placement import PLACEMENTS, resolve_placement, split_cores
from loongsage.config.roles_rules import config_problems, is_partitioned
from loongsage.config.run_modes import RUN_MODES, mode_conflicts, pipeline_settings
from loongsage.config.sampling_rules import sampling_problems
from loongsage.config.schema import Config, DataConfig
from loongsage.config.teacher_rules import teacher_problems

# Each key's choices come from the module that implements them.
CHOICES = {
    "rollout.engine": OwnedChoices("loongsage.inference.engines:ENGINES"),
    "rollout.dtype": ("float32", "bfloat16"),
    "trainer.backend": OwnedChoices("loongsage.training.backends:TRAIN_BACKENDS"),
    "trainer.strategy": OwnedChoices("loongsage.training.fsdp.parallel:STRATEGIES"),
    "trainer.dtype": ("float32", "bfloat16"),
    "trainer.weight_sync": OwnedChoices("loongsage.transfer.transport_choice:WEIGHT_SYNCS"),
    "algorithm.policy_loss": OwnedChoices("loongsage.algorithms.policy_losses:POLICY_LOSSES"),
    "algorithm.loss_aggregation": AGGREGATION_MODES,
    "algorithm.kl_kind": KL_KINDS,
    "algorithm.proximal": OwnedChoices("loongsage.training.objective:PROXIMAL_SOURCES"),
    "algorithm.is_level": IS_LEVELS,
    "algorithm.is_mode": IS_MODES,
    "algorithm.stale_filter": STALE_FILTERS,
    "run.mode": tuple(RUN_MODES),
    "cluster.name": ("local", "slurm"),
    "cluster.container.runtime": RUNTIMES,
    "run.placement": PLACEMENTS,
    "agent.export": OwnedChoices("loongsage.agentflow.router.export:MODES"),
    "router.hosted_tools": OwnedChoices("loongsage.agentflow.router.hosted_tools:POLICIES"),
}


class ConfigError(ValueError):
    """A config that cannot run; the message lists every problem found."""


def check(cfg: Config) -> None:
    problems = [
        *_choice_problems(cfg),
        *_range_problems(cfg),
        *sampling_problems(cfg),
        *algorithm_problems(cfg),
        *_backend_problems(cfg),
        *_unread_setting_problems(cfg),
        *_batch_problems(cfg),
        *_mix_problems(cfg),
        *teacher_problems(cfg),
        *_window_problems(cfg),
        *_placement_problems(cfg),
        *_roles_problems(cfg),
        *_container_problems(cfg),
    ]
    if problems:
        raise ConfigError("invalid config:\n" + "\n".join(f"  - {p}" for p in problems))


def _get(cfg: Config, dotted: str):
    value = cfg
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


def _choice_problems(cfg: Config) -> list[str]:
    problems = []
    for key, choices in CHOICES.items():
        value = _get(cfg, key)
        problems += choices.problems(key, value) if isinstance(choices, OwnedChoices) else choice_problems(key, value, choices)
    return problems


def _range_problems(cfg: Config) -> list[str]:
    r, t, a = cfg.rollout, cfg.trainer, cfg.algorithm
    rules = [
        (r.num_engines >= 1, f"rollout.num_engines={r.num_engines} must be >= 1"),
        (r.prompts_per_step >= 1, f"rollout.prompts_per_step={r.prompts_per_step} must be >= 1"),
        (r.max_running >= 1, f"rollout.max_running={r.max_running} must be >= 1"),
        (r.num_threads >= 1, f"rollout.num_threads={r.num_threads} must be >= 1"),
        (t.world_size >= 1, f"trainer.world_size={t.world_size} must be >= 1"),
        (t.megatron.tp >= 1, f"trainer.megatron.tp={t.megatron.tp} must be >= 1"),
        (t.megatron.pp >= 1, f"trainer.megatron.pp={t.megatron.pp} must be >= 1"),
        (t.megatron.dp >= 1, f"trainer.megatron.dp={t.megatron.dp} must be >= 1"),
        (t.megatron.ep >= 1, f"trainer.megatron.ep={t.megatron.ep} must be >= 1"),
        (t.micro_batch_size >= 1, f"trainer.micro_batch_size={t.micro_batch_size} must be >= 1"),
        (t.mini_batches >= 1, f"trainer.mini_batches={t.mini_batches} must be >= 1"),
        (t.lr > 0, f"trainer.lr={t.lr} must be > 0"),
        (t.max_grad_norm > 0, f"trainer.max_grad_norm={t.max_grad_norm} must be > 0"),
        (len(t.betas) == 2 and all(0 <= b < 1 for b in t.betas), f"trainer.betas={list(t.betas)} must be two numbers in [0, 1)"),
        (
            t.weight_sync_bucket_mb is None or t.weight_sync_bucket_mb >= 1,
            f"trainer.weight_sync_bucket_mb={t.weight_sync_bucket_mb} must be >= 1 (or null: the transport's default)",
        ),
        (t.num_threads >= 1, f"trainer.num_threads={t.num_threads} must be >= 1"),
        (0 <= a.clip_low <= 1, f"algorithm.clip_low={a.clip_low} must be in [0, 1] (1: no lower bound)"),
        (a.clip_high >= 0, f"algorithm.clip_high={a.clip_high} must be >= 0"),
        (a.kl_coef >= 0, f"algorithm.kl_coef={a.kl_coef} must be >= 0"),
        (a.is_high > 0, f"algorithm.is_high={a.is_high} must be > 0"),
        (0 <= a.is_low < a.is_high, f"algorithm.is_low={a.is_low} must be in [0, algorithm.is_high={a.is_high})"),
        (cfg.data.num_reward_workers >= 1, f"data.num_reward_workers={cfg.data.num_reward_workers} must be >= 1"),
        (cfg.agent.max_concurrent >= 1, f"agent.max_concurrent={cfg.agent.max_concurrent} must be >= 1"),
        (cfg.warm_start.epochs >= 1, f"warm_start.epochs={cfg.warm_start.epochs} must be >= 1"),
        (cfg.warm_start.batch_size >= 1, f"warm_start.batch_size={cfg.warm_start.batch_size} must be >= 1"),
        (cfg.warm_start.lr > 0, f"warm_start.lr={cfg.warm_start.lr} must be > 0"),
        (
            not cfg.warm_start.source or bool(cfg.agent.name),
            f"warm_start.source={cfg.warm_start.source!r} needs agent.name: demonstrations are replayed by the run's agent",
        ),
        (
            cfg.pipeline.max_staleness is None or cfg.pipeline.max_staleness >= 0,
            f"pipeline.max_staleness={cfg.pipeline.max_staleness} must be >= 0",
        ),
        (cfg.pipeline.max_inflight >= 0, f"pipeline.max_inflight={cfg.pipeline.max_inflight} must be >= 0 (0: automatic)"),
        (cfg.pipeline.batch_timeout_s > 0, f"pipeline.batch_timeout_s={cfg.pipeline.batch_timeout_s} must be > 0"),
        (
            cfg.run.placement != "colocate" or cfg.run.mode == "sync",
            f"run.placement=colocate needs run.mode=sync (got {cfg.run.mode}): colocated trainer and engines take turns "
            f"on the same devices, so rollout cannot overlap training; use run.placement=disaggregated",
        ),
        (cfg.cluster.nodes >= 1, f"cluster.nodes={cfg.cluster.nodes} must be >= 1"),
        (cfg.cluster.gpus_per_node >= 0, f"cluster.gpus_per_node={cfg.cluster.gpus_per_node} must be >= 0"),
        (cfg.cluster.time_limit_min >= 1, f"cluster.time_limit_min={cfg.cluster.time_limit_min} must be >= 1"),
        (
            cfg.cluster.container.runtime == "none" or bool(cfg.cluster.container.image),
            f"cluster.container.runtime={cfg.cluster.container.runtime} needs cluster.container.image",
        ),
        (cfg.run.steps >= 1, f"run.steps={cfg.run.steps} must be >= 1"),
        (cfg.run.max_restarts >= 0, f"run.max_restarts={cfg.run.max_restarts} must be >= 0"),
        (
            not cfg.run.spare_trainer or cfg.run.max_restarts > 0,
            "run.spare_trainer=true keeps processes for trainer restarts, but run.max_restarts=0 allows none",
        ),
        (
            not cfg.run.spare_trainer or cfg.roles.trainer.gpus == 0,
            f"run.spare_trainer=true needs trainer ranks on CPUs, not roles.trainer.gpus={cfg.roles.trainer.gpus}: "
            f"a spare holds no GPU while its rank lives, and taking the seat's GPU after it started is not built",
        ),
        (cfg.rollout.max_engine_restarts >= 0, f"rollout.max_engine_restarts={cfg.rollout.max_engine_restarts} must be >= 0"),
        (cfg.data.reward_timeout_s > 0, f"data.reward_timeout_s={cfg.data.reward_timeout_s} must be > 0"),
        *(
            (getattr(cfg.router, bound) >= 0, f"router.{bound}={getattr(cfg.router, bound)} must be >= 0 (0: no bound)")
            for bound in ("max_turns_per_trajectory", "max_tokens_per_trajectory")
        ),
        (cfg.run.save_every >= 1, f"run.save_every={cfg.run.save_every} must be >= 1"),
        (cfg.run.keep_checkpoints >= 0, f"run.keep_checkpoints={cfg.run.keep_checkpoints} must be >= 0 (0: keep all)"),
        (cfg.run.keep_every >= 0, f"run.keep_every={cfg.run.keep_every} must be >= 0 (0: none kept apart)"),
        (
            cfg.run.keep_every <= 0 or cfg.run.keep_checkpoints > 0,
            f"run.keep_every={cfg.run.keep_every} selects checkpoints to keep among those deleted, but "
            f"run.keep_checkpoints=0 deletes none: set run.keep_checkpoints, or leave run.keep_every at 0",
        ),
        (
            cfg.run.keep_every <= 0 or cfg.run.save_every < 1 or cfg.run.keep_every % cfg.run.save_every == 0,
            f"run.keep_every={cfg.run.keep_every} is not a multiple of run.save_every={cfg.run.save_every}: "
            f"no scheduled checkpoint would fall on it",
        ),
        (cfg.logging.rollouts_per_step >= 0, f"logging.rollouts_per_step={cfg.logging.rollouts_per_step} must be >= 0"),
    ]
    return [message for ok, message in rules if not ok]


def _backend_problems(cfg: Config) -> list[str]:
    # One knob per concept: trainer.world_size and trainer.strategy are the fsdp backend's,
    # trainer.megatron.* megatron's; a knob the chosen backend does not read is refused, not ignored.
    t = cfg.trainer
    if not uses_megatron(t):
        changed = _changed_settings(t.megatron, "trainer.megatron")
        if not changed:
            return []
        return [
            f"{', '.join(changed)} only applies to trainer.backend={MEGATRON} (got trainer.backend={t.backend!r}): "
            f"set trainer.backend={MEGATRON}, or leave trainer.megatron.* at the defaults "
            f"(the fsdp backend's ranks are trainer.world_size)"
        ]
    problems = []
    if min(t.megatron.tp, t.megatron.dp, t.megatron.ep) >= 1:  # sizes < 1 are range problems of their own
        problems += filter(None, [expert_parallel_problem(t.megatron.tp, t.megatron.dp, t.megatron.ep)])
    if t.world_size != 1:
        problems.append(
            f"trainer.world_size={t.world_size} is the fsdp backend's rank count; trainer.backend={MEGATRON} runs "
            f"{MEGATRON_RANKS} ranks: set trainer.megatron.dp={t.world_size} for {t.world_size} data-parallel ranks "
            f"(and trainer.megatron.tp / trainer.megatron.pp for model parallelism), and leave trainer.world_size at 1"
        )
    if t.strategy == "fsdp2":
        problems.append(
            f"trainer.strategy={t.strategy} is the fsdp backend's sharding; trainer.backend={MEGATRON} shards with "
            f"trainer.megatron.tp / trainer.megatron.pp / trainer.megatron.dp and trainer.megatron.distributed_optimizer: "
            f"leave trainer.strategy at ddp"
        )
    return problems


def _unread_setting_problems(cfg: Config) -> list[str]:
    """Settings the chosen parts do not read: refused, never accepted and ignored."""
    problems = []
    if uses_megatron(cfg.trainer) and cfg.trainer.gradient_checkpointing:
        problems.append(
            f"trainer.gradient_checkpointing=true is read by the fsdp backend only (trainer.backend={MEGATRON} does not "
            f"recompute activations); leave it at false, or use trainer.backend=fsdp"
        )
    changed_moe = _changed_settings(cfg.trainer.moe, "trainer.moe")
    if changed_moe and cfg.trainer.backend not in MOE_SETTINGS_BACKENDS:
        problems.append(
            f"{', '.join(changed_moe)} is not read by trainer.backend={cfg.trainer.backend} (only by "
            f"{', '.join(f'trainer.backend={b}' for b in MOE_SETTINGS_BACKENDS)}): set trainer.backend="
            f"{MOE_SETTINGS_BACKENDS[0]}, or leave trainer.moe.* at the defaults"
        )
    if cfg.trainer.moe.aux_loss_coeff is not None and cfg.trainer.moe.aux_loss_coeff < 0:
        problems.append(f"trainer.moe.aux_loss_coeff={cfg.trainer.moe.aux_loss_coeff} must be >= 0 (or null: the checkpoint's)")
    changed_sglang = _changed_settings(cfg.rollout.sglang, "rollout.sglang")
    if cfg.rollout.engine == "embedded" and changed_sglang:
        problems.append(
            f"{', '.join(changed_sglang)} only applies to rollout.engine=sglang (got rollout.engine=embedded, which "
            f"runs in its Ray actor, not as a launched server): set rollout.engine=sglang, or leave rollout.sglang.* "
            f"at the defaults"
        )
    if cfg.rollout.engine == "embedded" and cfg.roles.rollout.ep != 1:
        problems.append(
            f"roles.rollout.ep={cfg.roles.rollout.ep}: the embedded engine runs every expert in one process; "
            f"expert parallelism is rollout.engine=sglang's (--ep-size): leave roles.rollout.ep at 1"
        )
    changed_router = _changed_settings(cfg.router, "router")
    if changed_router and not cfg.agent.name:
        problems.append(
            f"{', '.join(changed_router)} is read by the AgentFlow router, which runs only for agent episodes: "
            f"set agent.name, or leave router.* at the defaults"
        )
    workers = cfg.data.num_reward_workers
    if cfg.agent.name and workers != DataConfig.num_reward_workers:
        problems.append(
            f"data.num_reward_workers={workers} is not read when agent.name is set (agent={cfg.agent.name!r}): each "
            f"agent episode is scored in its own thread as it ends; leave it at {DataConfig.num_reward_workers}"
        )
    return problems


def _changed_settings(block, prefix: str) -> list[str]:
    """`prefix.name=value` for each field of the dataclass `block` that differs from its default."""
    defaults = type(block)()
    return [
        f"{prefix}.{f.name}={getattr(block, f.name)}"
        for f in fields(block)
        if getattr(block, f.name) != getattr(defaults, f.name)
    ]


def _batch_problems(cfg: Config) -> list[str]:
    r, t = cfg.rollout, cfg.trainer
    problems = []
    if cfg.algorithm.advantage in GROUP_RELATIVE and r.group_size < 2:
        problems.append(
            f"rollout.group_size={r.group_size} must be >= 2 for algorithm.advantage={cfg.algorithm.advantage} (advantages "
            f"compare responses within a group; reinforce_pp normalises over the batch instead)"
        )
    samples = r.prompts_per_step * r.group_size
    # Each data-parallel shard splits into mini-batches of whole micro-batches.
    dp = data_parallel_size(t)
    per_minibatch = dp * t.mini_batches * t.micro_batch_size
    if r.group_size >= 1 and per_minibatch >= 1 and samples % per_minibatch:
        problems.append(
            f"rollout.prompts_per_step * rollout.group_size = {r.prompts_per_step} * {r.group_size} = {samples} samples per step "
            f"must be divisible by {data_parallel_key(t)} * trainer.mini_batches * trainer.micro_batch_size = "
            f"{dp} * {t.mini_batches} * {t.micro_batch_size} = {per_minibatch}"
        )
    return problems


def _mix_problems(cfg: Config) -> list[str]:
    mix = cfg.data.mix
    if not mix:
        return []
    problems = []
    if not cfg.agent.name:
        problems.append("data.mix needs agent runs: set agent.name (an entry may use agent: chat for single completions)")
    names = [entry.name for entry in mix]
    for index, entry in enumerate(mix):
        where = f"data.mix[{index}]"
        if not entry.name:
            problems.append(f"{where}.name is empty: each mixed source needs a name (metrics and checkpoints use it)")
        elif names.count(entry.name) > 1:
            problems.append(f"{where}.name={entry.name!r} is used by more than one entry")
        if not entry.source:
            problems.append(f"{where}.source is empty")
        if entry.weight <= 0:
            problems.append(f"{where}.weight={entry.weight} must be > 0")
    if problems:
        return problems
    total = sum(entry.weight for entry in mix)
    prompts = cfg.rollout.prompts_per_step
    for index, (entry, share) in enumerate(zip(mix, mix_shares(mix, prompts).values())):
        if abs(share - round(share)) > 1e-9 or round(share) == 0:
            problems.append(
                f"data.mix[{index}] ({entry.name}): rollout.prompts_per_step * weight / total weight = "
                f"{prompts} * {entry.weight:g} / {total:g} = {share:g} prompts per step; it must be a whole number >= 1 "
                f"so that every batch holds the configured proportions"
            )
    return problems


def _window_problems(cfg: Config) -> list[str]:
    if cfg.run.mode not in RUN_MODES:  # a choice problem of its own
        return []
    pipeline = pipeline_settings(cfg)
    try:
        build_window(pipeline.window, cfg.rollout.prompts_per_step, max(pipeline.max_staleness, 0))
    except (ValueError, TypeError) as exc:
        return [f"pipeline.window={pipeline.window!r}: {exc}", *mode_conflicts(cfg)]
    return mode_conflicts(cfg)


def _placement_problems(cfg: Config) -> list[str]:
    if is_partitioned(cfg.roles):  # actors sit on their roles' devices, not pinned to this machine's cores
        return []
    try:
        placement = resolve_placement(cfg.run.placement, cfg.run.mode)
        split_cores(placement, train_ranks(cfg.trainer), cfg.rollout.num_engines, ranks_named=train_ranks_named(cfg.trainer))
    except ValueError as exc:
        return [str(exc)]
    return []


def _roles_problems(cfg: Config) -> list[str]:
    # gpus >= 0, tp >= 1, rollout.gpus divisible by tp, colocated counts, and that the trainer ranks
    # and engines fill their roles' devices; whether the roles fit the allocation is only known once
    # Ray is up (cluster/roles.py partition).
    roles = cfg.roles
    colocate = resolve_placement(cfg.run.placement, cfg.run.mode) == "colocate"
    problems = config_problems(roles, colocate)
    if problems or not is_partitioned(roles):
        return problems
    t, trainer_gpus = cfg.trainer, roles.trainer.gpus
    ranks = train_ranks(t)
    if ranks != trainer_gpus and uses_megatron(t):
        fields_, values = train_ranks_named(t)
        per_copy = t.megatron.tp * t.megatron.pp
        dp_fix = [("trainer.megatron.dp", trainer_gpus // per_copy)] if per_copy >= 1 and trainer_gpus % per_copy == 0 else []
        fix = _either(*dp_fix, ("roles.trainer.gpus", ranks))
        problems.append(
            f"{fields_} = {values} = {ranks} trainer ranks must equal roles.trainer.gpus={trainer_gpus} (one trainer "
            f"rank per device once roles are partitioned); set {fix}"
        )
    elif ranks != trainer_gpus:
        fix = _either(("trainer.world_size", trainer_gpus), ("roles.trainer.gpus", ranks))
        problems.append(
            f"trainer.world_size={ranks} must equal roles.trainer.gpus={trainer_gpus} (one trainer "
            f"rank per device once roles are partitioned); set {fix}"
        )
    engines, rollout_gpus, tp = cfg.rollout.num_engines, roles.rollout.gpus, roles.rollout.tp
    if engines != rollout_gpus // tp:
        fix = _either(("rollout.num_engines", rollout_gpus // tp), ("roles.rollout.gpus", engines * tp))
        problems.append(
            f"rollout.num_engines={engines} must equal roles.rollout.gpus / roles.rollout.tp = "
            f"{rollout_gpus} / {tp} = {rollout_gpus // tp} (one engine per tp devices once roles are "
            f"partitioned); set {fix}"
        )
    return problems


def _either(*settings: tuple[str, int]) -> str:
    """The settings that would fix a mismatch, leaving out those that would set a count of 0."""
    return " or ".join(f"{key}={value}" for key, value in settings if value >= 1)


def _container_problems(cfg: Config) -> list[str]:
    # image, mounts; an unknown runtime is already a choice problem.
    container = cfg.cluster.container
    return container_problems(container) if container.runtime in RUNTIMES else []
