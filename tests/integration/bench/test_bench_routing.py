"""`python -m loongsage.bench routing` on tiny-moe with its engine's routers perturbed: the
trainer's routing differs from the engine's, and replaying the engine's brings the log-prob
mismatch down at least tenfold (the issue's bar), in one run."""

from __future__ import annotations

import re
import subprocess
import sys


def test_replay_cuts_the_mismatch_where_routing_really_differs():
    argv = ["--model", "tiny-moe", "--prompts", "8", "--response-len", "16", "--perturb", "0.02", "--threads", "1"]
    result = subprocess.run(
        [sys.executable, "-m", "loongsage.bench", "routing", *argv], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-4000:]
    rows = dict(
        re.findall(r"^  (with|without) replay: train/routing_mismatch=([\d.]+) train/mismatch_k3_kl=\S+$", result.stdout, re.M)
    )
    assert set(rows) == {"with", "without"} and float(rows["without"]) > 0, result.stdout
    ratio = float(re.search(r"^mismatch K3 without / with replay: ([\d.]+)x$", result.stdout, re.M).group(1))
    assert ratio >= 10, result.stdout
