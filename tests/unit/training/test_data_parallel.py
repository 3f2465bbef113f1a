"""Which samples each trainer rank gets: the shard of the data-parallel index it reports."""

from __future__ import annotations

import pytest

from loongsage.training.data_parallel import data_layout
from loongsage.training.errors import TrainerError


def test_every_fsdp_rank_is_its_own_shard():
    layout = data_layout([0, 1, 2], 3, "trainer.world_size=3")
    assert layout.per_rank(["a", "b", "c"]) == ["a", "b", "c"]
    assert layout.per_shard(["r0", "r1", "r2"]) == ["r0", "r1", "r2"]


def test_tensor_parallel_peers_share_a_shard():
    # 4 ranks, dp=2: ranks 0 and 1 hold one model copy, ranks 2 and 3 the other
    layout = data_layout([0, 0, 1, 1], 2, "trainer.megatron.dp=2")
    assert layout.per_rank(["shard0", "shard1"]) == ["shard0", "shard0", "shard1", "shard1"]
    assert layout.reporting_ranks == (0, 2)
    assert layout.per_shard(["r0", "r1", "r2", "r3"]) == ["r0", "r2"]


@pytest.mark.parametrize(
    ("answers", "per_rank", "per_shard"),
    [
        ([0, 1, 0, 1], ["s0", "s1", "s0", "s1"], ["r0", "r1"]),  # data-parallel index fastest
        ([1, 1, 0, 0], ["s1", "s1", "s0", "s0"], ["r2", "r0"]),  # results still come back in shard order
    ],
)
def test_the_workers_answers_decide_not_the_rank_order(answers, per_rank, per_shard):
    layout = data_layout(answers, 2, "trainer.megatron.dp=2")
    assert layout.per_rank(["s0", "s1"]) == per_rank
    assert layout.per_shard(["r0", "r1", "r2", "r3"]) == per_shard


@pytest.mark.parametrize(
    "answers",
    [
        [0, 0, 0, 1],  # unequal shares
        [0, 0, 1, 2],  # an index past dp - 1
        [0, 0, -1, 1],
        [1, 1, 1, 1],  # shard 0 trained by nobody
        [0, 0, "1", 1],  # not an int
        [False, False, True, True],
        [0.0, 0.0, 1.0, 1.0],
        [0, 0, None, 1],
    ],
)
def test_answers_that_do_not_cover_every_shard_equally_are_refused(answers):
    with pytest.raises(TrainerError) as error:
        data_layout(answers, 2, "trainer.megatron.dp=2")
    assert str(error.value) == (
        f"the train workers' data_rank() answers, by rank, are {answers}; with trainer.megatron.dp=2 over 4 ranks "
        f"each data-parallel index 0..1 must be held by exactly 2 rank(s)"
    )


@pytest.mark.parametrize(("ranks", "size"), [(4, 3), (2, 4), (2, 0)])
def test_ranks_that_do_not_split_into_the_data_parallel_size_are_refused(ranks, size):
    with pytest.raises(TrainerError, match=rf"^{ranks} trainer ranks cannot be split into trainer.megatron.dp={size} equal"):
        data_layout(list(range(ranks)), size, f"trainer.megatron.dp={size}")


def test_a_layout_refuses_lists_of_the_wrong_length():
    layout = data_layout([0, 0, 1, 1], 2, "trainer.megatron.dp=2")
    with pytest.raises(ValueError, match="3 shards for a data-parallel size of 2"):
        layout.per_rank(["a", "b", "c"])
    with pytest.raises(ValueError, match="2 results for 4 ranks"):
        layout.per_shard(["r0", "r1"])
