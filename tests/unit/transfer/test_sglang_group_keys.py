"""Our weight-update sender (rank 0) meets a receiver built by SGLang's own
`init_custom_process_group`: the store keys must agree (docs/sglang_protocol.md, difference 1).
Needs the `sglang` package (`pip install --no-deps sglang==0.5.23` is enough); skipped without it."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

from loongsage.inference.sglang.ports import free_ports
from loongsage.inference.weight_wire.process_group import WeightUpdateGroup

RECEIVER = textwrap.dedent(
    """
    import sys, torch, torch.distributed as dist
    from sglang.srt.utils.common import init_custom_process_group
    group = init_custom_process_group(
        backend="gloo", init_method=f"tcp://127.0.0.1:{sys.argv[1]}", world_size=2, rank=1, group_name="weights-1"
    )
    tensor = torch.zeros(6)
    dist.broadcast(tensor, src=0, group=group)
    print(tensor.tolist())
    """
)


def test_a_receiver_built_by_sglang_gets_our_broadcast():
    pytest.importorskip("sglang.srt.utils.common")
    port = free_ports("127.0.0.1", 1)[0]
    receiver = subprocess.Popen([sys.executable, "-c", RECEIVER, str(port)], stdout=subprocess.PIPE, text=True)
    group = WeightUpdateGroup("gloo", "127.0.0.1", port, 0, 2, "weights-1")
    group.broadcast(torch.arange(6.0))
    out, _ = receiver.communicate(timeout=60)
    group.close()
    assert out.strip() == "[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]"
