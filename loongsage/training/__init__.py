"""Training backends behind one controller-side handle, TrainGroup."""

from loongsage.training.errors import TrainerError
from loongsage.training.group import TrainGroup
from loongsage.training.protocol import TrainBackend

__all__ = ["TrainBackend", "TrainGroup", "TrainerError"]
