"""HF models under torch.distributed (DDP or FSDP2), one TrainWorker per rank."""

from loongsage.training.fsdp.worker import TrainWorker

__all__ = ["TrainWorker"]
