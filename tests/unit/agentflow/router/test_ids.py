"""Trajectory ids as URL path segments: any id round-trips, and the segment holds only
characters no client or server rewrites."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loongsage.agentflow.router.errors import RouterError
from loongsage.agentflow.router.ids import decode_segment, encode_segment
from loongsage.agentflow.router.keys import Keys

UNRESERVED = re.compile(r"[A-Za-z0-9_~-]+")


@given(st.text(min_size=1))
def test_any_id_round_trips_through_a_safe_segment(trajectory_id):
    segment = encode_segment(trajectory_id)
    assert UNRESERVED.fullmatch(segment)
    assert decode_segment(segment, "trajectory_id") == trajectory_id


@pytest.mark.parametrize(
    "trajectory_id, segment",
    [
        ("step3-g2-m1", "step3-g2-m1"),
        ("owner/repo#12", "owner~2Frepo~2312"),
        (".", "~2E"),
        ("..", "~2E~2E"),
        ("~", "~7E"),
        ("é", "~C3~A9"),
    ],
)
def test_plain_ids_stay_readable_and_the_rest_is_escaped(trajectory_id, segment):
    assert encode_segment(trajectory_id) == segment


def test_hand_written_segments_decode_literally_and_bad_escapes_are_400():
    assert decode_segment("run.7", "trajectory_id") == "run.7"
    assert decode_segment("a~2fb", "trajectory_id") == "a/b"  # lowercase hex too
    for bad in ("a~", "a~g1", "~FF"):  # a lone '~', a non-hex escape, bytes that are not UTF-8
        with pytest.raises(RouterError) as raised:
            decode_segment(bad, "trajectory_id")
        assert raised.value.status == 400 and raised.value.param == "trajectory_id"
    with pytest.raises(ValueError, match="empty"):
        encode_segment("")


def test_trajectory_keys_open_their_own_trajectory_only():
    keys = Keys("admin-secret")
    mine, other = keys.for_trajectory("a/1"), keys.for_trajectory("a/2")
    assert mine != other and mine == Keys("admin-secret").for_trajectory("a/1")
    assert Keys("another-run").for_trajectory("a/1") != mine
    keys.check(mine, "a/1")
    keys.check("admin-secret", "a/1")
    keys.check("admin-secret")
    for key, trajectory in ((mine, "a/2"), (mine, None), (other, "a/1"), ("nope", "a/1")):
        with pytest.raises(RouterError) as raised:
            keys.check(key, trajectory)
        assert raised.value.status == 401
