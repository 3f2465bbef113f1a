"""Teachers for on-policy distillation: scoring through the engine protocol, and a manager that
keeps any number of them under a budget of resident engine slots."""

from loongsage.teachers.manager import TeacherManager
from loongsage.teachers.scoring import ScoreRequest, TeacherScores
from loongsage.teachers.teacher import Teacher

__all__ = ["ScoreRequest", "Teacher", "TeacherManager", "TeacherScores"]
