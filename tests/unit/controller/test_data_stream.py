"""The data stream: items by cursor, unsettled items replayed first after a resume, and the
checkpoints written before cursors existed."""

from __future__ import annotations

from loongsage.config import DataConfig
from loongsage.controller.data_stream import DataStream, from_legacy_state

ARITHMETIC = DataConfig(source="synthetic_arithmetic", options={"size": 10}, system_prompt="Be brief.")


def _ids(stream: DataStream, count: int) -> list[str]:
    return [stream.take().id for _ in range(count)]


def test_items_follow_one_seeded_order_per_epoch_and_epochs_differ():
    stream = DataStream(ARITHMETIC, 4, seed=3)
    first, second = _ids(stream, 10), _ids(stream, 10)
    assert sorted(first) == sorted(second) and first != second
    assert _ids(DataStream(ARITHMETIC, 4, seed=3), 20) == first + second, "the order is the seed's alone"
    item = DataStream(ARITHMETIC, 4, seed=3).take()
    assert item.messages[0] == {"role": "system", "content": "Be brief."} and item.messages[1]["role"] == "user"


def test_unsettled_items_are_replayed_first_and_then_the_stream_goes_on():
    stream = DataStream(ARITHMETIC, 4, seed=0)
    taken = [stream.take() for _ in range(6)]  # two batches queued: items 0-7
    for item in taken[:2] + taken[4:]:
        stream.settle(item)
    state = stream.state_dict()
    # Taken but unsettled (2, 3) and queued but not yet handed out (6, 7): all replayed.
    assert state == {"next_index": {"": 8}, "pending": [["", 2], ["", 3], ["", 6], ["", 7]]}
    resumed = DataStream(ARITHMETIC, 4, seed=0)
    resumed.load_state_dict(state)
    reference = DataStream(ARITHMETIC, 4, seed=0)
    order = _ids(reference, 12)
    assert _ids(resumed, 8) == [order[2], order[3], order[6], order[7], *order[8:12]]


def test_a_checkpoint_from_before_cursors_resumes_on_the_same_items():
    stream = DataStream(ARITHMETIC, 4, seed=0)
    order = _ids(DataStream(ARITHMETIC, 4, seed=0), 24)
    # Old format: the stream stood at epoch 1, index 2 (item 12); two items of the batch taken
    # at epoch 0, index 8 were pending (offsets 1 and 3: items 9 and 11).
    legacy = {"prompts": {"epoch": 1, "index": 2}, "pending": [[{"epoch": 0, "index": 8}, 1], [{"epoch": 0, "index": 8}, 3]]}
    stream.load_state_dict(from_legacy_state(legacy, stream))
    assert _ids(stream, 4) == [order[9], order[11], order[12], order[13]]
