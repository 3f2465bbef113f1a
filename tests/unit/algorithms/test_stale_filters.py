"""M2PO's cutoff and mask, and OPSM's sequence drop, against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from loongsage.algorithms.stale_filters import filtered_tokens, m2po_cutoff, m2po_mask, opsm_keep, squared_log_ratios

# Squared log-ratios 0.25, 0.09, 0.01, 0.01, 0 (log-ratios 0.5, 0.3, 0.1, -0.1, 0): mean 0.072.
SQUARED = torch.tensor([0.01, 0.25, 0.0, 0.09, 0.01])


@pytest.mark.parametrize(
    ("threshold", "cutoff"),
    [
        (0.1, math.inf),  # 0.072 <= 0.1: nothing goes
        (0.04, 0.25),  # without 0.25: 0.11 / 4 = 0.0275
        (0.02, 0.09),  # without 0.25: 0.0275 > 0.02; without 0.09 too: 0.02 / 3
        (0.0, 0.01),  # only the exact zero is left
    ],
)
def test_m2po_cutoff_drops_the_largest_until_the_second_moment_fits(threshold, cutoff):
    assert m2po_cutoff(SQUARED, threshold) == pytest.approx(cutoff)


def test_m2po_cutoff_ties_go_together_and_edges():
    # without one 0.09 the mean is 0.045 <= 0.05; its tie goes too, leaving 0
    assert m2po_cutoff(torch.tensor([0.09, 0.09, 0.0]), 0.05) == pytest.approx(0.09)
    assert m2po_cutoff(torch.tensor([1.0, 2.0]), 0.5) == 0.0  # even the smallest is too far: every token
    assert m2po_cutoff(torch.zeros(0), 0.04) == math.inf


def test_m2po_mask_keeps_what_is_below_the_cutoff_and_never_unmasks_padding():
    proximal = torch.tensor([[0.5, 0.3, 0.1, 9.0], [-0.1, 0.0, 0.0, 0.0]])
    behaviour = torch.zeros(2, 4)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    squared = squared_log_ratios(proximal, behaviour, mask)
    torch.testing.assert_close(squared.sort().values, SQUARED.double().sort().values)
    kept = m2po_mask(proximal, behaviour, mask, m2po_cutoff(squared, 0.04))
    assert kept.tolist() == [[0, 1, 1, 0], [1, 1, 0, 0]] and kept.dtype == mask.dtype
    assert filtered_tokens(mask, kept) == 1


def test_opsm_drops_only_diverged_sequences_with_negative_advantage():
    behaviour = torch.zeros(4, 3)
    # mean log(pi_behav / pi_theta) per row over its trained tokens: 0.3, 0.3, 0.05, 0.3 (padding 50 ignored)
    current = torch.tensor([[-0.3, -0.3, 0.0], [-0.6, 0.0, -50.0], [-0.05, -0.05, -0.05], [-0.3, -0.3, -0.3]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0], [1, 1, 1], [1, 1, 1]])
    advantages = torch.tensor([-1.0, 1.0, -1.0, -0.5])
    keep = opsm_keep(current, behaviour, advantages, mask, delta=0.1)
    # row 0: diverged and negative -> dropped; row 1: positive; row 2: within delta; row 3: dropped
    assert keep[:, 0].tolist() == [0.0, 1.0, 1.0, 0.0]
    assert keep.shape == (4, 3) and (keep == keep[:, :1]).all()
    assert filtered_tokens(mask, keep) == 5  # rows 0 and 3: 2 + 3 trained tokens


def test_opsm_with_per_token_advantages_drops_the_negative_tokens_of_a_diverged_sequence():
    keep = opsm_keep(torch.full((1, 3), -1.0), torch.zeros(1, 3), torch.tensor([[1.0, -2.0, 0.0]]), torch.ones(1, 3), 0.1)
    assert keep.tolist() == [[1.0, 0.0, 1.0]]
