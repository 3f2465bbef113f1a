"""The task the agent-program tests give each program: a one-line bug, its test, and the sandbox
backends to run it in."""

from __future__ import annotations

from loongsage.agentflow.sandbox import available_backends

REPO = {
    "calc.py": "def add(a, b):\n    return a - b\n",
    "tests/test_calc.py": "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n",
}
PROMPT = "add(2, 3) returns -1 instead of 5. Fix calc.py."
BACKENDS = [b for b in ("bwrap", "local") if b in available_backends()] or ["local"]
