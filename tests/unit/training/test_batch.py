from __future__ import annotations

import pytest
import torch

from loongsage.sample import Sample
from loongsage.training.batch import PAD_TOKEN_ID, pack_samples, split_even, split_micro_batches


def two_samples() -> list[Sample]:
    return [
        Sample(
            prompt_ids=[11, 12, 13],
            response_ids=[21, 22],
            response_logprobs=[-0.5, -0.25],
            loss_mask=[1, 0],
            advantage=2.0,
        ),
        Sample(prompt_ids=[31], response_ids=[41, 42, 43, 44], response_logprobs=[-1.0, -2.0, -3.0, -4.0], advantage=-1.0),
    ]


def test_pack_right_pads_tokens_and_attention():
    batch = pack_samples(two_samples())
    P = PAD_TOKEN_ID
    assert batch.input_ids.tolist() == [[11, 12, 13, 21, 22], [31, 41, 42, 43, 44]]
    assert batch.attention_mask.tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 1, 1]]
    short = pack_samples([Sample(prompt_ids=[5], response_ids=[6]), two_samples()[0]])
    assert short.input_ids.tolist()[0] == [5, 6, P, P, P]
    assert short.attention_mask.tolist()[0] == [1, 1, 0, 0, 0]
    assert short.position_ids.tolist() == [[0, 1, 2, 3, 4]] * 2


def test_response_token_is_scored_from_the_position_before_it():
    batch = pack_samples(two_samples())
    # Column c holds the prediction of input_ids[:, c + 1].
    assert batch.targets.tolist() == [[12, 13, 21, 22], [41, 42, 43, 44]]
    assert batch.loss_mask.tolist() == [[0, 0, 1, 0], [1, 1, 1, 1]]
    assert batch.advantages.tolist() == [[0, 0, 2.0, 2.0], [-1.0, -1.0, -1.0, -1.0]]
    assert batch.rollout_logprobs.tolist() == [[0, 0, -0.5, -0.25], [-1.0, -2.0, -3.0, -4.0]]
    assert batch.response_spans == [(2, 4), (0, 4)]


def test_columns_start_at_the_first_position_that_predicts_a_response_token():
    batch = pack_samples([Sample(prompt_ids=[1, 2, 3, 4], response_ids=[5, 6]), Sample(prompt_ids=[7, 8, 9], response_ids=[10])])
    assert batch.first_column == 2  # shortest prompt (3 tokens) - 1
    assert batch.targets.tolist() == [[4, 5, 6], [10, 0, 0]]
    assert batch.loss_mask.tolist() == [[0, 1, 1], [1, 0, 0]]
    assert batch.response_spans == [(1, 3), (0, 1)]
    assert batch.logits_to_keep == 4  # positions 2..5, the last one dropped


def test_padding_columns_carry_no_loss():
    batch = pack_samples([Sample(prompt_ids=[1, 2], response_ids=[3]), Sample(prompt_ids=[1], response_ids=[2, 3, 4, 5])])
    assert batch.loss_mask.tolist() == [[0, 1, 0, 0], [1, 1, 1, 1]]
    assert batch.advantages.shape == batch.loss_mask.shape


def test_response_values_cut_back_per_sample():
    batch = pack_samples(two_samples())
    per_token = torch.arange(8, dtype=torch.float32).reshape(2, 4)
    assert batch.response_values(per_token) == [[2.0, 3.0], [4.0, 5.0, 6.0, 7.0]]


def test_missing_rollout_logprobs_give_none():
    samples = two_samples()
    samples[1].response_logprobs = []
    assert pack_samples(samples).rollout_logprobs is None


def test_token_versions_line_up_with_response_columns():
    samples = two_samples()
    samples[0].weight_versions, samples[1].weight_versions = [5, 6], [3, 3, 4, 4]
    batch = pack_samples(samples)
    # Same columns as rollout_logprobs: sample 0's two response tokens sit in columns 2, 3.
    assert batch.token_versions.tolist() == [[0, 0, 5, 6], [3, 3, 4, 4]]
    assert batch.token_versions.shape == batch.loss_mask.shape
    samples[1].weight_versions = []
    assert pack_samples(samples).token_versions is None


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("loss_mask", [1], "sample 0: loss_mask has 1 entries but response_ids has 2"),
        ("response_logprobs", [-1.0, -1.0, -1.0], "sample 0: response_logprobs has 3"),
        ("weight_versions", [1, 1, 1], "sample 0: weight_versions has 3 entries but response_ids has 2"),
        ("response_ids", [], "sample 0: response_ids is empty"),
        ("prompt_ids", [], "sample 0: prompt_ids is empty"),
    ],
)
def test_bad_sample_names_the_field(field, value, message):
    samples = two_samples()
    setattr(samples[0], field, value)
    with pytest.raises(ValueError, match=message):
        pack_samples(samples)


def test_split_micro_batches_keeps_order_and_remainder():
    assert split_micro_batches(list(range(5)), 2) == [[0, 1], [2, 3], [4]]


def test_split_even_names_the_field():
    assert split_even(list(range(6)), 3, "trainer.world_size") == [[0, 1], [2, 3], [4, 5]]
    with pytest.raises(ValueError, match="7 samples does not divide into trainer.world_size=2"):
        split_even(list(range(7)), 2, "trainer.world_size")
