from __future__ import annotations

import pytest
import torch

from loongsage.algorithms.advantages import (
    ADVANTAGE_ESTIMATORS,
    dr_grpo_advantages,
    group_reward_std,
    grouped_advantages,
    grpo_advantages,
    reinforce_pp_advantages,
    rloo_advantages,
)


def test_grpo_normalized_by_unbiased_group_std():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 3.0, 1.0, 2.0, 2.0])
    adv = grpo_advantages(rewards, group_size=4)
    # group 1: mean 0.5, deviations +-0.5, unbiased std sqrt(4 * 0.25 / 3) = 0.577350
    #          -> +-0.5 / 0.577351 = +-0.866024
    # group 2: mean 2, deviations (1, -1, 0, 0), std sqrt(2 / 3) = 0.816497
    #          -> +-1 / 0.816498 = +-1.224743
    expected = torch.tensor([0.866024, -0.866024, -0.866024, 0.866024, 1.224743, -1.224743, 0.0, 0.0])
    torch.testing.assert_close(adv, expected, atol=1e-5, rtol=0)


def test_grpo_without_std_is_mean_centred():
    rewards = torch.tensor([3.0, 1.0, 0.0, 1.0])
    adv = grpo_advantages(rewards, group_size=2, normalize_std=False)
    # means 2 and 0.5
    torch.testing.assert_close(adv, torch.tensor([1.0, -1.0, -0.5, 0.5]))


def test_all_equal_group_gives_exact_zero_not_nan():
    rewards = torch.tensor([0.1, 0.1, 0.1, 1.0, 0.0, 0.0])
    adv = grpo_advantages(rewards, group_size=3)
    assert torch.isfinite(adv).all()
    assert adv[:3].tolist() == [0.0, 0.0, 0.0]
    # group 2: mean 1/3, deviations (2/3, -1/3, -1/3), std sqrt((4/9 + 2/9) / 2) = 0.577350
    torch.testing.assert_close(adv[3:], torch.tensor([1.154700, -0.577350, -0.577350]), atol=1e-5, rtol=0)


def test_group_of_one_is_zero():
    assert grpo_advantages(torch.tensor([1.0, 0.0]), group_size=1).tolist() == [0.0, 0.0]


def test_indivisible_length_names_group_size():
    with pytest.raises(ValueError, match="group_size=4"):
        grpo_advantages(torch.zeros(6), group_size=4)


def test_bad_group_size_and_shape():
    with pytest.raises(ValueError, match="group_size"):
        grpo_advantages(torch.zeros(4), group_size=0)
    with pytest.raises(ValueError, match="1-D"):
        grpo_advantages(torch.zeros(2, 2), group_size=2)


def test_group_reward_std_and_zero_variance_fraction():
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.3, 0.3])
    std = group_reward_std(rewards, group_size=2)
    # (1,1) -> 0; (0,1) -> sqrt(0.5) = 0.707107; (0.3,0.3) -> 0
    torch.testing.assert_close(std, torch.tensor([0.0, 0.707107, 0.0]), atol=1e-6, rtol=0)
    assert (std == 0).float().mean().item() == pytest.approx(2 / 3)


def test_grouped_advantages_by_id_match_positional_groups_and_allow_uneven_groups():
    from loongsage.algorithms.advantages import grouped_advantages

    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0])
    ids = torch.tensor([7, 3, 7, 3, 3])
    out = grouped_advantages(rewards, ids, normalize_std=False)
    # group 7: rewards (1, 0), mean 0.5; group 3: rewards (0, 1, 1), mean 2/3
    assert torch.allclose(out, torch.tensor([0.5, -2 / 3, -0.5, 1 / 3, 1 / 3]))
    normed = grouped_advantages(rewards, ids)
    std3 = torch.tensor([0.0, 1.0, 1.0]).std()
    assert torch.allclose(normed[[1, 3]], torch.tensor([-2 / 3, 1 / 3]) / (std3 + 1e-6))
    assert grouped_advantages(torch.tensor([1.0, 1.0]), torch.tensor([0, 0])).tolist() == [0.0, 0.0]
    with pytest.raises(ValueError, match="same 1-D shape"):
        grouped_advantages(rewards, ids[:2])


# Two interleaved groups of uneven size: group 5 holds 1, 0, 0 (mean 1/3), group 2 holds 3, 1 (mean 2).
UNEVEN_REWARDS = torch.tensor([1.0, 3.0, 0.0, 1.0, 0.0])
UNEVEN_GROUPS = torch.tensor([5, 2, 5, 2, 5])


def test_dr_grpo_is_mean_centred_and_refuses_a_std():
    adv = dr_grpo_advantages(UNEVEN_REWARDS, UNEVEN_GROUPS)
    torch.testing.assert_close(adv, torch.tensor([2 / 3, 1.0, -1 / 3, -1.0, -1 / 3]))
    with pytest.raises(ValueError, match="Dr. GRPO divides the advantages by no std"):
        dr_grpo_advantages(UNEVEN_REWARDS, UNEVEN_GROUPS, normalize_std=True)


def test_rloo_leaves_each_reward_out_of_its_own_baseline():
    adv = rloo_advantages(UNEVEN_REWARDS, UNEVEN_GROUPS)
    # group 5: 1 - (0 + 0) / 2 = 1, 0 - (1 + 0) / 2 = -0.5 (twice); group 2: 3 - 1 = 2, 1 - 3 = -2
    torch.testing.assert_close(adv, torch.tensor([1.0, 2.0, -0.5, -2.0, -0.5]))
    # with the std: group 5's unbiased std sqrt(1/3) = 0.577350, group 2's sqrt(2) = 1.414214
    scaled = rloo_advantages(UNEVEN_REWARDS, UNEVEN_GROUPS, normalize_std=True)
    torch.testing.assert_close(scaled, torch.tensor([1.732051, 1.414214, -0.866025, -1.414214, -0.866025]), atol=1e-5, rtol=0)


def test_rloo_of_a_lone_or_constant_group_is_zero():
    adv = rloo_advantages(torch.tensor([4.0, 1.0, 1.0]), torch.tensor([0, 1, 1]))
    assert adv.tolist() == [0.0, 0.0, 0.0]


def test_reinforce_pp_normalises_over_the_whole_batch_ignoring_groups():
    adv = reinforce_pp_advantages(UNEVEN_REWARDS, UNEVEN_GROUPS)
    # batch mean 1, deviations 0, 2, -1, 0, -1; unbiased std sqrt(6 / 4) = 1.224745
    torch.testing.assert_close(adv, torch.tensor([0.0, 1.632993, -0.816497, 0.0, -0.816497]), atol=1e-5, rtol=0)
    centred = reinforce_pp_advantages(UNEVEN_REWARDS, torch.zeros(5, dtype=torch.long), normalize_std=False)
    torch.testing.assert_close(centred, torch.tensor([0.0, 2.0, -1.0, 0.0, -1.0]))
    # every prompt answered once (groups of one) still learns, unlike grpo
    assert reinforce_pp_advantages(UNEVEN_REWARDS, torch.arange(5)).abs().sum() > 0


def test_registry_names_every_estimator():
    assert {"grpo", "dr_grpo", "rloo", "reinforce_pp"} <= set(ADVANTAGE_ESTIMATORS)
    assert ADVANTAGE_ESTIMATORS["grpo"] is grouped_advantages
