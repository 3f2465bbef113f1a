"""Teachers for on-policy distillation: scoring through the engine protocol, and a manager that
keeps any number of them under a budget of resident engine slots."""

from loongsage.teachers.manager import Teacher, TeacherManager
from loongsage.teachers.scoring import ScoreRequest, TeacherScores

__all__ = ["ScoreRequest", "Teacher", "TeacherManager", "TeacherScores"]
