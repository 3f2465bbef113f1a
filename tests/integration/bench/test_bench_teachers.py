"""`python -m loongsage.bench teachers` at its smallest (the tiny model, 1 and 2 teachers, one
pair): it runs both sides on real engine processes and prints the memory and throughput ratios
the README quotes, each a number."""

from __future__ import annotations

import re
import subprocess
import sys


def test_the_teachers_bench_prints_memory_and_throughput_ratios():
    argv = ["--model", "tiny", "--teachers", "1,2", "--samples", "2", "--repeats", "1"]
    result = subprocess.run(
        [sys.executable, "-m", "loongsage.bench", "teachers", *argv], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-4000:]
    memory = re.findall(r"^(\d) teachers, one slot: peak memory ([\d.]+)x .* \(anonymous ([\d.]+)x\)$", result.stdout, re.M)
    assert [count for count, _, _ in memory] == ["1", "2"], result.stdout
    assert memory[0][1:] == ("1.00", "1.00")  # the one-teacher run against itself
    assert all(0.5 < float(ratio) < 3 for _, peak, anon in memory for ratio in (peak, anon)), result.stdout
    throughput = re.findall(
        r"^ratio \((\d) teachers: throughput one slot / all resident\): median ([\d.]+)x", result.stdout, re.M
    )
    assert [count for count, _ in throughput] == ["1", "2"] and all(float(r) > 0 for _, r in throughput), result.stdout
