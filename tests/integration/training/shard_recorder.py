"""A stand-in train worker that records what TrainGroup sends it (no torch: cheap Ray actors).

Its data-parallel index comes from `model_path`, read as a JSON list indexed by rank; samples
are told apart by their group_id."""

from __future__ import annotations

import json
import os


class ShardRecorder:
    def __init__(self, model_path, trainer, algo, seed, rank, cpus=None):
        self.rank, self.answer = rank, json.loads(model_path)[rank]
        self.seen: list[int] = []

    def pid(self):
        return os.getpid()

    def rendezvous_address(self):
        return "127.0.0.1", 0

    def setup(self, master_addr, master_port):
        pass

    def data_rank(self):
        return self.answer

    def weight_source(self):
        return None  # holds no weights to push

    def train_step(self, samples, policy_version=None):
        self.seen = [s.group_id for s in samples]
        return {"train/loss": 1.5, "train/samples": float(len(samples))}

    def supervised_step(self, samples, lr):
        return self.train_step(samples)

    def compute_logprobs(self, samples):
        return [[float(self.rank), float(s.group_id)] for s in samples]

    def received(self) -> list[int]:
        return self.seen
