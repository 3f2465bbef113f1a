"""The Teacher Manager on real embedded engines: three teachers (the tiny model perturbed three
ways) scored through one or two resident slots, checked against transformers running each
teacher on its own."""

from __future__ import annotations

import random
import threading

import pytest
import torch
from transformers import AutoModelForCausalLM

from loongsage.cluster.topology import gather, probe_node
from loongsage.inference.client import EngineClient
from loongsage.teachers import ScoreRequest, Teacher, TeacherManager
from loongsage.teachers.loaders import HostLoader
from loongsage.teachers.store import STORE, TeacherStore
from loongsage.transfer.planner import plan_routes
from loongsage.transfer.routes import Endpoint
from loongsage.transfer.topology_model import TopologyModel
from tests.integration.inference.embedded.embedded_cli_support import engine_process
from tests.integration.inference.embedded.engine_support import running_engine
from tests.integration.teachers.teacher_support import perturbed_model

NAMES = ("math", "code", "chat")


@pytest.fixture(scope="module")
def teachers(tiny_model_path, tmp_path_factory) -> list[Teacher]:
    return [
        Teacher(name, str(perturbed_model(tiny_model_path, tmp_path_factory.mktemp(name) / "model", seed)))
        for seed, name in enumerate(NAMES)
    ]


@pytest.fixture(scope="module")
def reference(teachers):
    """Each teacher's next-token log-probabilities under transformers, per sequence."""
    models = {t.name: AutoModelForCausalLM.from_pretrained(t.model_path, dtype=torch.float32).eval() for t in teachers}

    def next_logprobs(teacher: str, prompt: list[int], response: list[int]) -> torch.Tensor:
        ids = prompt + response
        with torch.no_grad():
            logits = models[teacher](torch.tensor([ids])).logits[0, len(prompt) - 1 : -1]
        return torch.log_softmax(logits.double(), -1)  # [len(response), vocab]

    return next_logprobs


def requests(count: int, seed: int = 0) -> list[ScoreRequest]:
    rng = random.Random(seed)
    return [
        ScoreRequest(NAMES[i % 3], [1] + [rng.randrange(2, 4000) for _ in range(5)], [rng.randrange(2, 4000) for _ in range(4)])
        for i in range(count)
    ]


def slots(servers) -> list[EngineClient]:
    return [EngineClient(server.base_url, timeout=120) for server in servers]


def test_one_slot_scores_every_teacher_with_one_swap_each_and_resident_teachers_first(tiny_model_path, teachers, reference):
    asked = requests(6)  # interleaved: math, code, chat, math, code, chat
    with running_engine(tiny_model_path) as server:
        manager = TeacherManager(teachers, slots([server]))
        scored = manager.score(asked)
        assert manager.stats.swaps == 3  # grouped by teacher: one swap each, not one per sample
        for request, scores in zip(asked, scored):
            assert scores.teacher == request.teacher
            expected = reference(request.teacher, request.prompt_ids, request.response_ids)
            sampled = expected.gather(1, torch.tensor(request.response_ids)[:, None])[:, 0]
            assert torch.allclose(torch.tensor(scores.logprobs, dtype=torch.float64), sampled, atol=1e-4), request
        # The teachers really differ: scoring with the wrong one would have shown.
        as_code = reference("code", asked[0].prompt_ids, asked[0].response_ids)
        wrong = as_code.gather(1, torch.tensor(asked[0].response_ids)[:, None])[:, 0]
        assert (torch.tensor(scored[0].logprobs, dtype=torch.float64) - wrong).abs().max() > 0.1

        resident = manager.resident()
        assert resident == ["chat"]
        manager.score([asked[0], asked[2]])  # math, chat
        assert manager.stats.swaps == 4  # chat (resident) went first, then one swap to math
        assert manager.resident() == ["math"]
        manager.close()


def test_two_slots_load_the_next_teacher_while_one_scores_and_top_k_matches(tiny_model_path, teachers, reference):
    asked = requests(6, seed=1)
    with running_engine(tiny_model_path) as first, running_engine(tiny_model_path) as second:
        manager = TeacherManager(teachers, slots([first, second]), top_k=4)
        scored = manager.score(asked)
        assert manager.stats.swaps == 3 and sorted(manager.resident()) == ["chat", "code"]
        for request, scores in zip(asked, scored):
            expected = reference(request.teacher, request.prompt_ids, request.response_ids)
            top = expected.topk(4, dim=-1)
            got = torch.tensor(scores.top_logprobs, dtype=torch.float64)
            assert torch.allclose(got, top.values, atol=1e-4)
            # Each listed id carries its own logprob (near ties may list in either order).
            assert torch.allclose(got, expected.gather(1, torch.tensor(scores.top_ids)), atol=1e-4)
        manager.close()


def test_one_slot_and_all_resident_give_the_same_log_probs(tiny_model_path, teachers):
    """teachers.max_resident=1 against every teacher resident: swapping changes nothing scored."""
    asked = requests(6, seed=2)
    with (
        running_engine(tiny_model_path) as one,
        running_engine(teachers[0].model_path, weight_version="math") as math,
        running_engine(teachers[1].model_path, weight_version="code") as code,
        running_engine(teachers[2].model_path, weight_version="chat") as chat,
    ):
        swapping = TeacherManager(teachers, slots([one]), top_k=3)
        resident = TeacherManager(teachers, slots([math, code, chat]), top_k=3, resident=list(NAMES))
        through_one, all_resident = swapping.score(asked), resident.score(asked)
        assert swapping.stats.swaps == 3 and resident.stats.swaps == 0
        for a, b in zip(through_one, all_resident):
            assert a.teacher == b.teacher and a.top_ids == b.top_ids
            assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-6, rtol=0)
            assert torch.allclose(torch.tensor(a.top_logprobs), torch.tensor(b.top_logprobs), atol=1e-6, rtol=0)
        swapping.close()
        resident.close()


def test_teachers_held_in_host_memory_are_pushed_into_the_slot_and_score_as_from_disk(tiny_model_path, teachers, ray_runtime):
    """teachers.offload=host: a TeacherStore actor holds every teacher and TransferMesh pushes the
    one asked for into the slot (shm on this machine); the scores equal the disk loader's."""
    asked = requests(6, seed=3)
    store = ray_runtime.remote(TeacherStore).remote({t.name: t.model_path for t in teachers}, None)
    with running_engine(tiny_model_path) as from_host, running_engine(tiny_model_path) as from_disk:
        topology = TopologyModel(gather([probe_node(addresses=["127.0.0.1"])]))
        engine = Endpoint("engine/0", "engine", "127.0.0.1", url=from_host.base_url)
        plan = plan_routes(topology, [Endpoint(STORE, "source", "127.0.0.1")], [engine])
        assert [route.transport for route in plan.routes] == ["shm"]
        ray_runtime.get(store.set_plan.remote(plan.to_dict()))
        host = TeacherManager(teachers, slots([from_host]), top_k=3, loader=HostLoader(store))
        disk = TeacherManager(teachers, slots([from_disk]), top_k=3)
        by_host, by_disk = host.score(asked), disk.score(asked)
        assert host.stats.swaps == 3 and host.resident() == disk.resident()
        for a, b in zip(by_host, by_disk):
            assert a.teacher == b.teacher and a.top_ids == b.top_ids
            assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-6, rtol=0)
            assert torch.allclose(torch.tensor(a.top_logprobs), torch.tensor(b.top_logprobs), atol=1e-6, rtol=0)
        # the push committed the teacher's name as the slot's weight version
        assert EngineClient(from_host.base_url).get_weight_version() == host.resident()[0]
        with pytest.raises(ray_runtime.exceptions.RayTaskError, match="holds no teacher 'physics'"):
            ray_runtime.get(store.push.remote("physics", from_host.base_url))
        host.close()
        disk.close()
    ray_runtime.kill(store)


def test_a_slot_swapped_behind_the_managers_back_fails_the_score(tiny_model_path, teachers):
    with running_engine(tiny_model_path) as server:
        client = EngineClient(server.base_url, timeout=120)
        manager = TeacherManager(teachers, [client])
        manager.score(requests(1))
        client.update_weights_from_disk(teachers[1].model_path, weight_version="intruder")
        with pytest.raises(RuntimeError, match="teacher 'math' was scored by weights 'intruder', not 'math'"):
            manager.score(requests(1))
        manager.close()


def test_bad_teacher_setups_and_requests_are_named(tiny_model_path, teachers):
    with pytest.raises(ValueError, match="teachers named twice: math"):
        TeacherManager([teachers[0], teachers[0]], [EngineClient("http://127.0.0.1:1")])
    with pytest.raises(ValueError, match=r"at least one engine slot \(teachers.max_resident >= 1\)"):
        TeacherManager(teachers, [])
    manager = TeacherManager(teachers, [EngineClient("http://127.0.0.1:1")])
    with pytest.raises(ValueError, match="no teacher named 'physics'; teachers: chat, code, math"):
        manager.score([ScoreRequest("physics", [1, 2], [3])])
    manager.close()


def _anon_kb(pid: int) -> int:
    """Anonymous resident memory: the process's own, not the page cache it maps (a teacher's
    memory-mapped files count in VmRSS while mapped, and are the kernel's to drop)."""
    with open(f"/proc/{pid}/status") as status:
        return int(next(line for line in status if line.startswith("RssAnon:")).split()[1])


def test_a_teacher_leaving_its_slot_leaves_no_memory_behind(big_model, tmp_path):
    """Four teachers of ~130 MB through one engine process: each swap writes the next teacher over
    the last, one tensor at a time from its memory-mapped files, so the process never holds a
    second teacher, not even during a swap (its anonymous memory, polled every few ms)."""
    path, weight_bytes = big_model
    names = ["t0", "t1", "t2", "t3"]
    folders = [str(perturbed_model(path, tmp_path / name, seed, scale=0.01)) for seed, name in enumerate(names)]
    with engine_process(folders[0], tmp_path / "engine.log", "--context-length", "64", "--weight-version", "t0") as engine:
        client = EngineClient(engine.base_url, timeout=120)
        manager = TeacherManager([Teacher(n, f) for n, f in zip(names, folders)], [client], resident=["t0"])
        ask = [ScoreRequest(n, [1, 5, 9], [200, 7]) for n in names]
        manager.score(ask[:1])
        one_teacher_kb = _anon_kb(engine.proc.pid)
        peak_kb, done = [one_teacher_kb], threading.Event()

        def poll() -> None:
            while not done.wait(0.003):
                peak_kb.append(_anon_kb(engine.proc.pid))

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        scores = manager.score(ask[1:])
        done.set()
        poller.join()
        now_kb = _anon_kb(engine.proc.pid)
        manager.close()
        client.close()
    assert manager.stats.swaps == 3 and [s.teacher for s in scores] == names[1:]
    assert len({tuple(s.logprobs) for s in scores}) == 3  # three different teachers answered
    weight_kb = weight_bytes // 1024
    assert now_kb - one_teacher_kb < weight_kb // 4, (one_teacher_kb, now_kb, weight_kb)
    assert max(peak_kb) - one_teacher_kb < weight_kb // 4, (one_teacher_kb, max(peak_kb), weight_kb)


@pytest.fixture
def big_model(llama_dir) -> tuple[str, int]:
    """test_engine_memory's ~130 MB random Llama (dir, bytes of its weights)."""
    return llama_dir
