"""The Teacher Manager's schedule with fake engine slots (no model): which teacher scores when,
which slot a swap evicts, and that the next teacher loads while the current one scores."""

from __future__ import annotations

import time

import pytest

from loongsage.teachers import ScoreRequest, Teacher, TeacherManager
from loongsage.teachers.loaders import DiskLoader

TEACHERS = [Teacher(name, f"/teachers/{name}") for name in ("a", "b", "c")]
SCORE_S = 0.4  # a fake slot's time to score a batch
LOAD_S = 0.1  # and to load a teacher


class FakeSlot:
    """Answers /generate as an engine holding whatever teacher was loaded last, and logs every call."""

    def __init__(self, name: str, log: list, holding: str | None = None):
        self.name, self.log, self.holding = name, log, holding

    def update_weights_from_disk(self, model_path: str, weight_version: str | None = None):
        self.log.append(("load", self.name, weight_version, time.monotonic()))
        time.sleep(LOAD_S)
        self.holding = weight_version
        self.log.append(("loaded", self.name, weight_version, time.monotonic()))

    def generate(self, input_ids, sampling_params, return_logprob, logprob_start_len, **extra):
        self.log.append(("score", self.name, self.holding, time.monotonic(), len(input_ids)))
        time.sleep(SCORE_S)
        self.log.append(("scored", self.name, self.holding, time.monotonic()))
        answers = []
        for ids, start in zip(input_ids, logprob_start_len):
            tokens = ids[start:]
            answers.append(
                {"meta_info": {"weight_version": self.holding, "input_token_logprobs": [(-1.0, t, None) for t in tokens]}}
            )
        return answers


class ReadAheadLog(DiskLoader):
    """The disk loader (it asks the fake slot to load from disk), noting what it reads ahead."""

    def __init__(self):
        self.read = []

    def read_ahead(self, teacher: Teacher) -> None:
        self.read.append(teacher.name)


def ask(*teachers: str) -> list[ScoreRequest]:
    return [ScoreRequest(t, [1, 2], [3 + i]) for i, t in enumerate(teachers)]


def events(log: list, kind: str) -> list[tuple]:
    return [entry for entry in log if entry[0] == kind]


def test_one_slot_scores_the_resident_teacher_first_and_each_teacher_once():
    loader = ReadAheadLog()
    log: list = []
    manager = TeacherManager(TEACHERS, [FakeSlot("s0", log, holding="b")], resident=["b"], loader=loader)
    scores = manager.score(ask("a", "b", "c", "a", "b"))
    # grouped: one call per teacher, the resident b first, then a and c in the order asked
    assert [(e[2], e[4]) for e in events(log, "score")] == [("b", 2), ("a", 2), ("c", 1)]
    assert [e[2] for e in events(log, "load")] == ["a", "c"] and manager.stats.swaps == 2
    # with no idle slot, the next teacher's files are read ahead while one scores
    assert loader.read == ["a", "c"]
    assert [s.teacher for s in scores] == ["a", "b", "c", "a", "b"]  # answers in request order
    assert manager.resident() == ["c"]
    manager.close()


def test_with_an_idle_slot_the_next_teacher_loads_while_the_current_one_scores():
    log: list = []
    manager = TeacherManager(TEACHERS, [FakeSlot("s0", log, "a"), FakeSlot("s1", log)], resident=["a"])
    manager.score(ask("a", "b"))
    (score_a,) = [e for e in events(log, "score") if e[2] == "a"]
    (scored_a,) = [e for e in events(log, "scored") if e[2] == "a"]
    (load_b,), (loaded_b,) = events(log, "load"), events(log, "loaded")
    # b's load on the idle slot overlaps a's scoring
    assert load_b[1] == "s1" and load_b[3] < scored_a[3] and loaded_b[3] > score_a[3]
    (score_b,) = [e for e in events(log, "score") if e[2] == "b"]
    assert score_b[1] == "s1"
    manager.close()


def test_a_swap_evicts_the_slot_used_longest_ago():
    log: list = []
    slots = [FakeSlot("s0", log, "a"), FakeSlot("s1", log, "b")]
    manager = TeacherManager(TEACHERS, slots, resident=["a", "b"])
    manager.score(ask("a"))
    manager.score(ask("b"))  # now a was used longest ago
    manager.score(ask("c"))
    (load_c,) = [e for e in events(log, "load") if e[2] == "c"]
    assert load_c[1] == "s0" and sorted(manager.resident()) == ["b", "c"]
    manager.close()


def test_resident_teachers_must_fit_the_slots():
    with pytest.raises(ValueError, match="do not fit 1 slot"):
        TeacherManager(TEACHERS, [FakeSlot("s0", [])], resident=["a", "b"])
    with pytest.raises(ValueError, match="do not fit"):
        TeacherManager(TEACHERS, [FakeSlot("s0", [])], resident=["z"])


def test_scores_of_concurrent_teacher_loads_are_never_mixed():
    """A slot loading one teacher while another slot scores: every answer carries its teacher's name."""
    log: list = []
    manager = TeacherManager(TEACHERS, [FakeSlot("s0", log), FakeSlot("s1", log)])
    scores = manager.score(ask("a", "b", "c", "a", "c"))
    assert [s.teacher for s in scores] == ["a", "b", "c", "a", "c"]
    assert all(e[2] in ("a", "b", "c") for e in events(log, "score"))
    manager.close()
