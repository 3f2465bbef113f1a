"""Synthesized SWE tasks (one injected bug in a small generated module)."""

from loongsage.tasks.swe.synth.generate import synth_task

__all__ = ["synth_task"]
