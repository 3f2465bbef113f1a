"""A teacher: a name and the model it serves, what the loaders and the manager both speak of."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Teacher:
    """`model_path`: an HF directory. Which samples it scores is the run's routing
    (config.teacher_rules.teacher_routes), not the teacher's."""

    name: str
    model_path: str
