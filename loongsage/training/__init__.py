"""Training backends behind one controller-side handle, TrainGroup.

TrainGroup (and with it Ray) is imported on first use: a rank's process, spawned or on a GPU
machine without Ray, loads its backend without the controller's side."""

from loongsage.training.errors import TrainerError

__all__ = ["TrainBackend", "TrainGroup", "TrainerError"]


def __getattr__(name: str):
    if name == "TrainGroup":
        from loongsage.training.group import TrainGroup

        return TrainGroup
    if name == "TrainBackend":
        from loongsage.training.protocol import TrainBackend

        return TrainBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
