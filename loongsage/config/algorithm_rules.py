"""The algorithm block's cross-field rules: combinations that cannot mean anything are refused
with the reason; everything else composes (tests/unit/config/test_algorithm_rules.py)."""

from __future__ import annotations

from loongsage.algorithms.advantages import ADVANTAGE_ESTIMATORS
from loongsage.algorithms.critic import CRITIC_ESTIMATORS, reads_critic
from loongsage.algorithms.losses import NORMED_MODES
from loongsage.config.owned_choices import choice_problems
from loongsage.config.schema import AlgorithmConfig, Config, CriticConfig


def algorithm_problems(cfg: Config) -> list[str]:
    a = cfg.algorithm
    return [
        *_advantage_problems(a),
        *_critic_problems(cfg),
        *_stale_filter_problems(a),
        *_behaviour_anchor_problems(a),
        *_dr_grpo_problems(a),
        *_norm_length_problems(a),
    ]


def _advantage_problems(a: AlgorithmConfig) -> list[str]:
    """An outcome estimator (registered, or by import path) or a critic's."""
    if reads_critic(a.advantage):
        return []
    problems = choice_problems("algorithm.advantage", a.advantage, ADVANTAGE_ESTIMATORS)
    return [f"{problem}; with a critic: {', '.join(sorted(CRITIC_ESTIMATORS))}" for problem in problems]


# The critic's settings and their defaults: what only a critic reads.
_CRITIC_ALGORITHM_SETTINGS = ("gamma", "lam", "value_clip")


def _critic_problems(cfg: Config) -> list[str]:
    a, critic = cfg.algorithm, cfg.trainer.critic
    if not reads_critic(a.advantage):
        defaults = AlgorithmConfig()
        changed = [f"algorithm.{name}" for name in _CRITIC_ALGORITHM_SETTINGS if getattr(a, name) != getattr(defaults, name)]
        changed += [
            f"trainer.critic.{name}" for name in vars(CriticConfig()) if getattr(critic, name) != getattr(CriticConfig(), name)
        ]
        if not changed:
            return []
        return [
            f"{', '.join(changed)} is read only by a critic: set algorithm.advantage to a critic's estimator "
            f"({', '.join(sorted(CRITIC_ESTIMATORS))}), or leave it at the default"
        ]
    problems = [
        f"algorithm.{name}={getattr(a, name)} must be in [0, 1]" for name in ("gamma", "lam") if not 0 <= getattr(a, name) <= 1
    ]
    if a.value_clip <= 0:
        problems.append(f"algorithm.value_clip={a.value_clip} must be > 0")
    if critic.lr <= 0:
        problems.append(f"trainer.critic.lr={critic.lr} must be > 0")
    return problems


def _dr_grpo_problems(a: AlgorithmConfig) -> list[str]:
    """Dr. GRPO is two changes together; half of it is another algorithm."""
    if a.advantage != "dr_grpo":
        return []
    problems = []
    if a.normalize_std:
        problems.append("algorithm.normalize_std=true: Dr. GRPO divides the advantages by no std (leave it null or false)")
    if a.loss_aggregation not in NORMED_MODES:
        problems.append(
            f"algorithm.loss_aggregation={a.loss_aggregation}: Dr. GRPO sums each episode's tokens over a constant "
            f"length (seq_mean_token_sum_norm with algorithm.loss_norm_length); algorithm=dr_grpo sets both"
        )
    return problems


def _norm_length_problems(a: AlgorithmConfig) -> list[str]:
    if a.loss_aggregation in NORMED_MODES:
        if a.loss_norm_length is None or a.loss_norm_length < 1:
            return [
                f"algorithm.loss_aggregation={a.loss_aggregation} divides by the constant algorithm.loss_norm_length, "
                f"got {a.loss_norm_length}: set it >= 1 (Dr. GRPO: the generation budget, rollout.max_new_tokens)"
            ]
        return []
    if a.loss_norm_length is not None:
        return [
            f"algorithm.loss_norm_length={a.loss_norm_length} is read only by algorithm.loss_aggregation="
            f"{' or '.join(NORMED_MODES)}: set that, or leave it null"
        ]
    return []


def _stale_filter_problems(a: AlgorithmConfig) -> list[str]:
    if a.stale_filter == "none":
        if a.stale_threshold is not None:
            return [
                f"algorithm.stale_threshold={a.stale_threshold} is read only by a stale filter: set "
                f"algorithm.stale_filter (m2po, opsm), or leave it null"
            ]
        return []
    problems = []
    if a.stale_threshold is not None and a.stale_threshold <= 0:
        problems.append(f"algorithm.stale_threshold={a.stale_threshold} must be > 0 (or null: the filter's reference value)")
    if a.stale_filter == "m2po" and a.proximal == "interpolate":
        problems.append(
            "algorithm.stale_filter=m2po cuts over the whole batch's proximal logprobs before the first update, the "
            "forward pass algorithm.proximal=interpolate exists to spare: use algorithm.proximal=recompute"
        )
    return problems


def _behaviour_anchor_problems(a: AlgorithmConfig) -> list[str]:
    """With the rollout logprobs as the proximal policy, pi_prox / pi_behav is 1 by construction:
    a correction of that ratio would select nothing (the reference forbids these too)."""
    if a.proximal != "behaviour":
        return []
    reads_the_ratio = []
    if a.is_level != "none":
        reads_the_ratio.append(f"algorithm.is_level={a.is_level}")
    if a.stale_filter == "m2po":
        reads_the_ratio.append("algorithm.stale_filter=m2po")
    return [
        f"{setting} corrects pi_prox / pi_behav, which algorithm.proximal=behaviour makes 1 by construction (the rollout "
        f"logprobs are the proximal policy): use algorithm.proximal=recompute or interpolate, or drop {setting.split('=')[0]}"
        for setting in reads_the_ratio
    ]
