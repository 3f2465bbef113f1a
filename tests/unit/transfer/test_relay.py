"""A relay's refusals, said before anything is received."""

from __future__ import annotations

import pytest

from loongsage.transfer.relay import Relay, RelayRefused


def test_a_cpu_relay_joins_gloo_groups_only_and_says_why():
    relay = Relay({"shm": ["http://127.0.0.1:1"]}, "127.0.0.1")
    with pytest.raises(RelayRefused, match=r"backend 'nccl': this relay holds buckets on cpu, joins gloo"):
        relay.join_group({"group_name": "g", "backend": "nccl", "master_address": "x", "master_port": 1})


def test_buckets_outside_a_session_and_a_second_session_are_refused():
    relay = Relay({"shm": ["http://127.0.0.1:1"]}, "127.0.0.1")
    with pytest.raises(RelayRefused, match="between begin_weight_update"):
        relay.take([])
    with pytest.raises(RelayRefused, match="no weight-update session is open"):
        relay.end()
    relay.begin()
    try:
        with pytest.raises(RelayRefused, match="already open"):
            relay.begin()
    finally:
        unreached = relay.end()  # nothing listens at its one engine's URL: named, with why
    assert list(unreached) == ["http://127.0.0.1:1"] and "Connection refused" in unreached["http://127.0.0.1:1"]
