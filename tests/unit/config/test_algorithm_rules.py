"""The algorithm block composes freely, except the combinations algorithm_rules refuses, each with
its reason: every policy loss x stale filter x importance level and mode x proximal policy."""

from __future__ import annotations

from itertools import product

import pytest

from loongsage.algorithms.off_policy import IS_LEVELS, IS_MODES
from loongsage.algorithms.policy_losses import POLICY_LOSSES
from loongsage.algorithms.stale_filters import STALE_FILTERS
from loongsage.config import Config, ConfigError, check
from loongsage.training.objective import PROXIMAL_SOURCES


def _config(**algorithm) -> Config:
    cfg = Config()
    for key, value in algorithm.items():
        setattr(cfg.algorithm, key, value)
    return cfg


def _refusals(stale_filter, is_level, proximal) -> list[str]:
    """The documented exclusions, restated."""
    refusals = []
    if proximal == "behaviour" and is_level != "none":
        refusals.append(f"algorithm.is_level={is_level} corrects pi_prox / pi_behav")
    if proximal == "behaviour" and stale_filter == "m2po":
        refusals.append("algorithm.stale_filter=m2po corrects pi_prox / pi_behav")
    if proximal == "interpolate" and stale_filter == "m2po":
        refusals.append("algorithm.stale_filter=m2po cuts over the whole batch")
    return refusals


def test_every_combination_composes_or_is_refused_with_its_reason():
    combinations = list(product(sorted(POLICY_LOSSES), STALE_FILTERS, IS_LEVELS, IS_MODES, PROXIMAL_SOURCES))
    for policy_loss, stale_filter, is_level, is_mode, proximal in combinations:
        cfg = _config(policy_loss=policy_loss, stale_filter=stale_filter, is_level=is_level, is_mode=is_mode, proximal=proximal)
        refusals = _refusals(stale_filter, is_level, proximal)
        if not refusals:
            check(cfg)
            continue
        with pytest.raises(ConfigError) as refused:
            check(cfg)
        message = str(refused.value)
        assert all(refusal in message for refusal in refusals), (policy_loss, stale_filter, is_level, is_mode, proximal)
        assert message.count("\n  - ") == len(refusals), message


@pytest.mark.parametrize(
    ("algorithm", "message"),
    [
        (dict(stale_threshold=0.04), "algorithm.stale_threshold=0.04 is read only by a stale filter"),
        (dict(stale_filter="m2po", stale_threshold=0.0), "algorithm.stale_threshold=0.0 must be > 0"),
        (dict(stale_filter="opsm_v2"), "algorithm.stale_filter='opsm_v2' is not one of none, m2po, opsm"),
        (dict(clip_low=1.5), r"algorithm.clip_low=1.5 must be in \[0, 1\] \(1: no lower bound\)"),
    ],
)
def test_stale_filter_settings_are_refused_by_name(algorithm, message):
    with pytest.raises(ConfigError, match=message):
        check(_config(**algorithm))


def test_cispo_without_a_lower_bound_and_a_set_threshold_compose():
    check(_config(policy_loss="cispo", clip_low=1.0, clip_high=4.0))
    check(_config(stale_filter="opsm", stale_threshold=1e-4))


@pytest.mark.parametrize(
    ("algorithm", "message"),
    [
        (
            dict(advantage="dr_grpo", loss_aggregation="seq_mean_token_sum_norm", loss_norm_length=64, normalize_std=True),
            "algorithm.normalize_std=true: Dr. GRPO divides the advantages by no std",
        ),
        (dict(advantage="dr_grpo"), "algorithm.loss_aggregation=token_mean: Dr. GRPO sums each episode's tokens"),
        (dict(loss_aggregation="seq_mean_token_sum_norm"), "divides by the constant algorithm.loss_norm_length, got None"),
        (
            dict(loss_norm_length=64),
            "algorithm.loss_norm_length=64 is read only by algorithm.loss_aggregation=seq_mean_token_sum_norm",
        ),
    ],
)
def test_dr_grpo_is_both_of_its_halves(algorithm, message):
    with pytest.raises(ConfigError, match=message):
        check(_config(**algorithm))


def test_the_normed_aggregation_composes_with_any_estimator():
    for advantage in ("grpo", "dr_grpo", "rloo", "reinforce_pp"):
        check(_config(advantage=advantage, loss_aggregation="seq_mean_token_sum_norm", loss_norm_length=64))


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (dict(gamma=0.99), r"algorithm.gamma is read only by a critic: set algorithm.advantage to a critic's estimator \(gae\)"),
        (dict(critic_lr=1e-4), "trainer.critic.lr is read only by a critic"),
        (dict(advantage="gae", lam=1.5), r"algorithm.lam=1.5 must be in \[0, 1\]"),
        (dict(advantage="gae", value_clip=0.0), "algorithm.value_clip=0.0 must be > 0"),
        (dict(advantage="gea"), r"algorithm.advantage='gea': unknown advantage estimator 'gea'; known: .*; with a critic: gae"),
    ],
)
def test_critic_settings_are_refused_by_name(settings, message):
    cfg = _config(**{k: v for k, v in settings.items() if k != "critic_lr"})
    if "critic_lr" in settings:
        cfg.trainer.critic.lr = settings["critic_lr"]
    with pytest.raises(ConfigError, match=message):
        check(cfg)


def test_a_critic_composes_with_every_policy_loss_and_stale_filter():
    for policy_loss, stale_filter in product(sorted(POLICY_LOSSES), STALE_FILTERS):
        check(_config(advantage="gae", policy_loss=policy_loss, stale_filter=stale_filter, gamma=0.99, lam=0.95))
