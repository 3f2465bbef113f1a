"""Structured configs: every key a recipe or an override may set, with its type and default.

Registered with Hydra's ConfigStore, so an unknown key or a value of the wrong type is
refused by Hydra itself, naming the key, before anything starts. Rules that span fields
live in `rules.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from loongsage.sampling import DEFAULT_MAX_NEW_TOKENS


@dataclass
class ModelConfig:
    # A registry name (smollm2-135m, tiny) or a local Hugging Face model directory.
    name: str = "smollm2-135m"


@dataclass
class SglangConfig:
    """rollout.engine=sglang: each engine is a server process that its Ray actor launches with
    SGLang's launch flags, watches and restarts (loongsage/inference/sglang/)."""

    # The server command the launch flags are appended to. On a GPU machine SGLang's own;
    # [python, -m, loongsage.inference.embedded] runs the embedded engine behind the same flags.
    command: list[str] = field(default_factory=lambda: ["python", "-m", "sglang.launch_server"])
    # --mem-fraction-static: the share of each device's memory for weights and KV cache.
    mem_fraction_static: float = 0.8
    # More launch flags, appended verbatim after the derived ones (e.g. [--attention-backend, fa3]).
    extra_args: list[str] = field(default_factory=list)
    # Seconds a (re)started server has to answer /health_generate before the engine is given up.
    startup_timeout_s: float = 600.0


@dataclass
class RolloutConfig:
    # Engine actor: a registered name (embedded, sglang; see loongsage/inference/engines.py) or an import path.
    engine: str = "embedded"
    num_engines: int = 1
    prompts_per_step: int = 8
    group_size: int = 8
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    max_running: int = 64
    max_context: int = 1024
    num_threads: int = 2
    dtype: str = "float32"
    request_timeout_s: float = 600.0
    # Restarts of one engine over the run (an SGLang server's process, the embedded engine's actor),
    # each back on its URL with the published weights before it serves; one more death fails the run.
    max_engine_restarts: int = 3
    # Only read by rollout.engine=sglang.
    sglang: SglangConfig = field(default_factory=SglangConfig)


@dataclass
class MegatronConfig:
    """Parallel layout of trainer.backend=megatron: the trainer runs tp * pp * dp ranks (one per
    device); each data-parallel shard of a batch goes to the tp * pp ranks that hold one model copy."""

    # Tensor-parallel size: each layer's weights split over this many ranks (on one node, in practice).
    tp: int = 1
    # Pipeline-parallel size: the layers split into this many consecutive stages.
    pp: int = 1
    # Data-parallel size: model copies, each training on its own share of every batch.
    dp: int = 1
    # Expert-parallel size (mixture-of-experts models only): each MoE layer's experts split over
    # this many ranks, which exchange their tokens. It adds no ranks: it must divide tp * dp.
    ep: int = 1
    # Megatron's distributed optimizer: optimizer state (and the fp32 main weights) sharded over the
    # dp ranks instead of replicated on each; nothing to shard at dp=1.
    distributed_optimizer: bool = True


@dataclass
class CriticConfig:
    """The value model a critic's estimator (algorithm.advantage=gae) trains beside the policy, in
    the same trainer ranks; refused without one. It starts from the policy's checkpoint with a
    zero value head, and takes the policy's strategy, micro-batches, betas, warmup and grad clip."""

    lr: float = 1e-5


@dataclass
class MoeConfig:
    """Router settings a user tunes in RL, for mixture-of-experts models (the model's own routing,
    experts and layers come from its config.json). Read by the backends in
    `loongsage.config.parallel.MOE_SETTINGS_BACKENDS`; refused under the others, and by a trainer
    whose model has no experts."""

    # The routers' load-balancing loss coefficient; null: the checkpoint's router_aux_loss_coef.
    aux_loss_coeff: Optional[float] = None
    # Keep every router's weights as loaded: no gradient, no optimizer state, no update.
    freeze_router: bool = False


@dataclass
class TrainerConfig:
    # Train-worker class: a registered name (fsdp, megatron; see loongsage/training/backends.py) or an import path.
    backend: str = "fsdp"
    # Ranks (one per device) of the fsdp backend, each a data-parallel rank. trainer.backend=megatron
    # sets its ranks with megatron.tp / pp / dp instead and refuses any other value than 1 here.
    world_size: int = 1
    # The fsdp backend's data parallelism: ddp (replicated weights) | fsdp2 (sharded); not megatron's.
    strategy: str = "ddp"
    micro_batch_size: int = 8
    mini_batches: int = 1
    lr: float = 1e-6
    weight_decay: float = 0.0
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    warmup_steps: int = 0
    max_grad_norm: float = 1.0
    dtype: str = "float32"
    num_threads: int = 2
    gradient_checkpointing: bool = False
    # Bucket size of a weight push; null: the transport's own default (loongsage.transfer.channel).
    weight_sync_bucket_mb: int | None = None
    # How weights reach the engines. mesh: TransferMesh plans a route per engine from the probed
    # topology (the fastest transport that reaches it, node relays) and prints the plan at start.
    # A transport name sends every engine the weights over that one transport: shm (same machine)
    # | inline (HTTP body), in /update_weights_from_tensor payloads only our engines read;
    # cuda_ipc (same machine), there in SGLang's own (CUDA IPC handles, CPU tensors in shared
    # memory); gloo (CPU) | nccl (GPU) broadcast from the trainer to a weight-update group
    # the engines join (/init_weights_update_group, /update_weights_from_distributed).
    weight_sync: str = "mesh"
    # Only read by trainer.backend=megatron; anything but the defaults with another backend is refused.
    megatron: MegatronConfig = field(default_factory=MegatronConfig)
    # Mixture-of-experts router settings (see MoeConfig for which backends read them).
    moe: MoeConfig = field(default_factory=MoeConfig)
    # Read only with algorithm.advantage=gae (see CriticConfig).
    critic: CriticConfig = field(default_factory=CriticConfig)


@dataclass
class OpdConfig:
    """On-policy distillation: the student's samples are scored by their data source's teacher
    (loongsage.algorithms.distill)."""

    # pg: each response token's advantage gains -coef * (log p_student - log p_teacher) of the
    # token sampled (the reward's advantage still applies). gkd: coef * a divergence between the
    # student's and the teacher's next-token distributions over the teacher's top_k tokens is
    # added to the loss.
    style: str = "pg"
    coef: float = 1.0
    # gkd only: forward_kl (teacher || student) | reverse_kl (student || teacher) | jsd.
    divergence: str = "reverse_kl"
    # jsd only: the teacher's weight in the mixture M = beta P_teacher + (1 - beta) P_student.
    beta: float = 0.5
    # gkd only: the teacher's most likely tokens per position the divergence runs over.
    top_k: int = 64


@dataclass
class AlgorithmConfig:
    # Advantage estimator: a registered name (grpo) or an import path `pkg.module:function`.
    advantage: str = "grpo"
    # Divide the advantages by their std; null: the estimator's own choice (grpo, reinforce_pp: yes;
    # rloo: no; dr_grpo: never, it refuses true).
    normalize_std: Optional[bool] = None
    # Policy loss: a registered name (ppo_clip) or an import path `pkg.module:function`.
    policy_loss: str = "ppo_clip"
    clip_low: float = 0.2
    clip_high: float = 0.28
    # token_mean | seq_mean_token_mean | seq_mean_token_sum | seq_mean_token_sum_norm (Dr. GRPO:
    # each episode's token sum over the constant loss_norm_length). See losses.masked_aggregate.
    loss_aggregation: str = "token_mean"
    # The constant of seq_mean_token_sum_norm (Dr. GRPO: the generation budget); read by that mode only.
    loss_norm_length: Optional[int] = None
    kl_coef: float = 0.0
    kl_kind: str = "k3"
    entropy_coef: float = 0.0
    # The policy the PPO ratio is taken against: recompute (the trainer's own logprobs at the
    # start of the step) | interpolate (approximated from the rollout and current logprobs by
    # weight version, no extra forward pass) | behaviour (the rollout logprobs: classic PPO on
    # stale data).
    proximal: str = "recompute"
    # Importance weights pi_prox / pi_behav for the tokens' staleness: none | token | sequence | geometric.
    is_level: str = "none"
    # truncate: min(w, is_high) | mask: drop tokens (or sequences) with w outside [is_low, is_high].
    is_mode: str = "truncate"
    is_low: float = 0.0
    is_high: float = 2.0
    # Tokens or sequences left out of the policy gradient for staleness, under any policy loss:
    # none | m2po (mask the batch's most off-policy tokens until the second moment of
    # log(pi_prox / pi_behav) is <= stale_threshold) | opsm (drop a negative-advantage sequence
    # whose mean log(pi_behav / pi_theta) exceeds stale_threshold). See algorithms/stale_filters.py.
    stale_filter: str = "none"
    # null: the filter's reference value (m2po 0.04, opsm 0.1); read only with a stale filter.
    stale_threshold: Optional[float] = None
    # R3, for a mixture-of-experts policy: the trainer routes each token to the experts the engine
    # routed it to (in the update's forward and in recompute), weighted by its own router's
    # probabilities of them. train/routing_mismatch is logged either way.
    routing_replay: bool = False
    # Read only by a critic's estimator (advantage=gae): the discount and GAE's lambda (1, 1: the
    # outcome reward reaches every token undiscounted, as verl's defaults), and how far the
    # value loss lets the critic move from its rollout values (PPO's value clip).
    gamma: float = 1.0
    lam: float = 1.0
    value_clip: float = 0.2
    # On-policy distillation toward the teachers (teachers.pool); read only when there are teachers.
    opd: OpdConfig = field(default_factory=OpdConfig)


@dataclass
class DataMixEntry:
    """One data source of a mixture: its items, reward, agent and share of every batch."""

    name: str = ""
    source: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    # An episode reward (swe, math, or `pkg.module:fn`); empty: data.reward.
    reward: str = ""
    # Relative share of rollout.prompts_per_step; every batch holds exactly these proportions.
    weight: float = 1.0
    # Empty: agent.name. `chat` is a single completion (answer = the reply).
    agent: str = ""
    # Merged over agent.options. temperature / top_p / top_k / max_tokens here override rollout.*
    # for this source's episodes; the system prompt is system_prompt below, not an agent option.
    agent_options: dict[str, Any] = field(default_factory=dict)
    system_prompt: Optional[str] = None
    # The teachers.pool entry that scores this source's samples; empty: they train on their reward only.
    teacher: str = ""


@dataclass
class DataConfig:
    # A registered data source name or an import path `pkg.module:factory`.
    source: str = "synthetic_arithmetic"
    # Keyword arguments for the data source (e.g. path for gsm8k_jsonl, difficulty knobs).
    options: dict[str, Any] = field(default_factory=dict)
    reward: str = "math"
    # The teachers.pool entry that scores this source's samples; empty: no teacher. With data.mix
    # each entry names its own.
    teacher: str = ""
    shuffle: bool = True
    system_prompt: Optional[str] = None
    num_reward_workers: int = 1
    # A reward call that has not returned by then scores 0 with the reason (rollout/reward_timeouts):
    # a hung reward never holds up its group.
    reward_timeout_s: float = 300.0
    # Several sources in fixed proportions (agent runs only); when set, it replaces source,
    # options and system_prompt above.
    mix: list[DataMixEntry] = field(default_factory=list)


@dataclass
class TeacherEntry:
    name: str = ""
    # A registry name (smollm2-135m, tiny) or a local Hugging Face directory; it must share the
    # student's tokenizer.
    model: str = ""


@dataclass
class TeachersConfig:
    """Teachers of on-policy distillation, kept under a budget of resident engines
    (loongsage.teachers). A data source names its teacher (data.teacher, data.mix[].teacher)."""

    pool: list[TeacherEntry] = field(default_factory=list)
    # Teacher engines holding weights at once; the other teachers are swapped in when their
    # samples come. 0: one per teacher.
    max_resident: int = 0
    # Where a teacher waits while it is not resident: `disk`, its files (the engine loads them,
    # SGLang's /update_weights_from_disk; page cache, no process memory), or `host`, a copy in
    # host memory (pinned on a GPU node) pushed into the engine by TransferMesh, a DMA and CUDA IPC
    # on a GPU instead of a read into pageable memory. Read only when some teacher is not resident.
    offload: str = "disk"


@dataclass
class AgentConfig:
    # Empty: no agent, each prompt is answered by one completion (math_grpo). Otherwise every
    # data item is an episode of this agent: a registry name (tool, blackbox, mini_swe_agent)
    # or an import path `pkg.module:Agent`, reaching the engines through the router.
    name: str = ""
    # Keyword arguments for the agent (tool: max_turns, max_tokens, context_budget, ...). Sampling
    # options (temperature, top_p, top_k, max_tokens) override rollout.*; unset, rollout.* applies.
    options: dict[str, Any] = field(default_factory=dict)
    # Sandbox backend of each episode's workspace (auto | bwrap | local | apptainer | import path).
    sandbox: str = "auto"
    # SandboxLimits fields (timeout_s, cpu_s, memory_mb, max_processes, max_file_mb, ...).
    sandbox_limits: dict[str, Any] = field(default_factory=dict)
    # Episodes running at once; each holds a sandbox and an agent thread or process.
    max_concurrent: int = 8
    # How the router renders messages and tools and parses tool calls.
    chat_format: str = "hermes"
    # Training samples per trajectory branch: concat (one, tool output masked) | per_turn.
    export: str = "concat"


@dataclass
class RouterSettings:
    """How the AgentFlow router answers what agent programs send (docs/agent_fields.md)."""

    # Hosted tools a program sends (OpenAI's web_search, file_search, ...; Anthropic's server
    # tools): drop (left out of the prompt, counted as agent/hosted_tools_dropped) | refuse (400).
    hosted_tools: str = "drop"
    # More model names that reach the served model, for programs that pick a model by name for
    # side calls (a small, fast one); the served name is model.name.
    model_aliases: list[str] = field(default_factory=list)
    # Bounds on one trajectory, over all its requests, for a program that loops or floods: model
    # turns, and tokens generated (each reply is cut to what is left). Past either, its requests
    # are refused (HTTP 400 naming the bound) and its episode counts in agent/budget_exhausted_frac.
    # 0: no bound.
    max_turns_per_trajectory: int = 0
    max_tokens_per_trajectory: int = 0


@dataclass
class WarmStartConfig:
    # Supervised steps on demonstrations before RL: the data source's items carry a
    # "demonstration" (tool calls, e.g. a SWE task's gold patch as str_replace + submit) that the
    # run's agent replays in a sandbox and the router records as if sampled. Empty: no warm start.
    source: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    epochs: int = 1
    batch_size: int = 8
    lr: float = 5e-5


@dataclass
class PipelineConfig:
    """The pipeline between rollout and training, which every run.mode runs. `window`,
    `max_staleness` and `partial_rollout` left unset (null) take the mode's values; sync and
    one_step_off fix them and refuse other values (the table: loongsage/config/run_modes.py)."""

    # Staleness window: no_window | window_gated | windowed_fifo | import path of a
    # loongsage.algorithms.staleness_windows.StalenessWindow subclass.
    window: Optional[str] = None
    # Versions a trained token may lag the trainer's weights; never exceeded (older groups are dropped).
    max_staleness: Optional[int] = None
    # Prompt groups generating at once; 0: rollout.prompts_per_step * (1 + max_staleness).
    max_inflight: int = 0
    # At a weight update, in-flight generation is aborted and continued with the new weights,
    # keeping the tokens it has (each token records its version). false: the update waits until
    # nothing is in flight.
    partial_rollout: Optional[bool] = None
    # Loss mask 0 on tokens generated by older weights than the sample's newest token (needs partial rollouts).
    mask_stale_tokens: bool = False
    # Drop groups whose rewards are all equal (no GRPO signal) and generate more instead (DAPO's
    # dynamic sampling; the oversampling is implicit: rollout keeps going until a batch is full).
    filter_zero_variance: bool = False
    # How long the trainer waits for a batch before the run fails with the pipeline's state.
    batch_timeout_s: float = 3600.0


@dataclass
class LoggingConfig:
    tensorboard: bool = True
    # How many sampled rollouts per step go into rollouts.jsonl for inspection.
    rollouts_per_step: int = 4
    progress: bool = True


@dataclass
class RunConfig:
    name: str = "run"
    steps: int = 50
    # The start time; in a Slurm job (cluster=slurm) the job id, which a requeued job keeps, so it
    # finds its checkpoint.
    dir: str = "runs/${run.name}/${run_stamp:${cluster.name}}"
    seed: int = 0
    resume: bool = False
    save_every: int = 10
    # Complete checkpoints kept: the newest keep_checkpoints, and every one whose step is a multiple
    # of keep_every; older ones are deleted once a newer one is complete. 0: keep all.
    keep_checkpoints: int = 0
    keep_every: int = 0
    # Rebuilds of the trainer group after one of its ranks dies (killed, out of memory), each from
    # the last checkpoint; one more death stops the run.
    max_restarts: int = 3
    # A second process per trainer rank, its imports done (torch, the model code: ~3.5 s on a CPU)
    # and holding no seat, which a restart adopts in place of starting a new one; then the next
    # spare starts. Costs a process's memory per rank. CPU ranks only (roles.trainer.gpus=0).
    spare_trainer: bool = False
    # sync: rollout, then training, then weight sync, in turn. one_step_off: the next batch is
    # generated (one version behind) while the trainer trains. fully_async: rollout never stops;
    # the pipeline's staleness window bounds how far behind its tokens may be.
    mode: str = "sync"
    # colocate: trainer and engines share the devices and take turns (sync only);
    # disaggregated: each has its own (on a CPU machine: its own cores), so they can run at once.
    # auto: colocate for sync, disaggregated otherwise.
    placement: str = "auto"
    ray_address: Optional[str] = None


@dataclass
class RoleConfig:
    # Devices this role gets from the allocation; 0 everywhere: the local machine, not partitioned.
    gpus: int = 0


@dataclass
class RolloutRoleConfig(RoleConfig):
    # Tensor-parallel size of one engine: tp consecutive devices on one node, or, when tp is more than
    # a node holds, whole nodes (rollout.engine=sglang: one server process per node, --nnodes).
    tp: int = 1
    # Expert-parallel size of one engine serving a mixture-of-experts model: its experts split over
    # ep of its tp devices (SGLang's --ep-size; must divide tp). The embedded engine takes 1.
    ep: int = 1


@dataclass
class RolesConfig:
    """Which devices of a multi-GPU allocation each role gets (loongsage.cluster.roles)."""

    trainer: RoleConfig = field(default_factory=RoleConfig)
    rollout: RolloutRoleConfig = field(default_factory=RolloutRoleConfig)
    teacher: RoleConfig = field(default_factory=RoleConfig)
    # Whether trainer and rollout share devices is run.placement, the one knob for colocation.


@dataclass
class ContainerConfig:
    # none | apptainer | enroot | pyxis: how each task of the job runs inside `image`.
    runtime: str = "none"
    image: str = ""
    # host_path:container_path pairs (the repository and the run dir need to be reachable).
    mounts: list[str] = field(default_factory=list)


@dataclass
class ClusterConfig:
    """Where the run executes (config group `cluster`: local, slurm, or a site file)."""

    # local: this machine, Ray started here. slurm: inside a Slurm allocation (through
    # `-m hydra/launcher=slurm` or `sbatch slurm/loongsage.sbatch`); the head node starts Ray
    # across the allocation and runs the controller.
    name: str = "local"
    nodes: int = 1
    gpus_per_node: int = 0
    cpus_per_task: int = 0  # 0: Slurm's default
    mem_gb: int = 0  # 0: Slurm's default
    partition: str = ""
    account: str = ""
    time_limit_min: int = 60
    container: ContainerConfig = field(default_factory=ContainerConfig)
    # Shell lines run at the start of the job on the head node (modules, venv, env vars).
    setup: list[str] = field(default_factory=list)
    # Seconds between Slurm's warning signal (USR2) and the time limit: time to checkpoint.
    signal_delay_s: int = 120
    # Requeues after that signal before the job is left to end (a run that can never finish in
    # its time limit must not requeue forever); submitit counts only time-outs.
    max_requeues: int = 3
    ray_timeout_s: float = 300.0


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    data: DataConfig = field(default_factory=DataConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    router: RouterSettings = field(default_factory=RouterSettings)
    warm_start: WarmStartConfig = field(default_factory=WarmStartConfig)
    teachers: TeachersConfig = field(default_factory=TeachersConfig)
    pipeline: PipelineConfig = field(default_factory=PipelineConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    run: RunConfig = field(default_factory=RunConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    roles: RolesConfig = field(default_factory=RolesConfig)
