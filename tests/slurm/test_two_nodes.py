"""Two Slurm nodes of this one machine (.ci/slurm_up.sh: node1 at 127.0.0.2, node2 at 127.0.0.3,
two fake GPUs each): the controller on node1 starts node2's Ray with `srun -w node2 ray start`,
the trainer runs on node1 and the engines on node2, and after every step the weights cross from
one node to the other; a requeued two-node job resumes from its checkpoint on both nodes again.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from urllib.parse import urlparse

import pytest

from loongsage.cluster.bootstrap import FIRST_ENGINE_PORT, FIRST_PORT, PORTS_PER_JOB
from tests.integration.launch.launch_support import scalars
from tests.paths import REPO_ROOT
from tests.slurm.test_launch import _assert_trained, _launch_on_slurm
from tests.slurm.test_requeue import _assert_resumed_once, requeue_under_submitit

# How the weights cross nodes: TransferMesh's plan (a relay on node2 takes them over gloo once and
# hands them to node2's engines over shared memory).
WEIGHT_SYNC = "trainer.weight_sync=mesh"
NODES = {"node1": "127.0.0.2", "node2": "127.0.0.3"}  # as .ci/slurm_up.sh configures them
TRAINER_NODE, ENGINE_NODE = "node1", "node2"
TWO_NODES = ["cluster.nodes=2", "run.placement=disaggregated", WEIGHT_SYNC]
# Rewards that differ between samples: every step has advantages, so every step changes the
# weights, and an engine left with the old ones would show in the mismatch.
MOVING = "data.reward=tests.toy_rewards:e_fraction"
K3_BOUND = 1e-6  # train/mismatch_k3_kl after a faithful push in fp32


@pytest.fixture(scope="module")
def two_nodes(slurm):
    states = dict(line.split() for line in _run("sinfo", "-h", "-N", "-o", "%N %t").splitlines())
    # "plnd": idle, with a pending job planned onto it (the previous test's may still be queued)
    if any(states.get(node) not in ("idle", "plnd", "mix", "alloc") for node in NODES):
        pytest.fail(
            f"the Slurm test cluster needs nodes {', '.join(NODES)} usable; sinfo says {states}; start it with .ci/slurm_up.sh"
        )
    for node, ip in NODES.items():
        assert f"NodeAddr={ip} " in _run("scontrol", "-o", "show", "node", node), f"{node} is not at {ip}"
    return slurm


def _run(*cmd: str) -> str:
    return subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=30).stdout


def test_trainer_on_node1_engines_on_node2_weights_cross_nodes(two_nodes, tmp_path):
    """Two trainer ranks fill node1, two engines node2; the issue's command shape
    (`launch.py -m ... cluster=slurm cluster.nodes=2 cluster.gpus_per_node=2 hydra/launcher=slurm`).
    Submitit starts a task on each node; only task 0 runs the controller."""
    layout = [
        "trainer.world_size=2",
        "trainer.micro_batch_size=2",  # 4 samples a step over 2 ranks
        "roles.trainer.gpus=2",
        "roles.rollout.gpus=2",
        "rollout.num_engines=2",
    ]
    result = _launch_on_slurm(tmp_path, *TWO_NODES, *layout, MOVING)
    assert result.returncode == 0, result.stderr[-4000:]
    run_dir = tmp_path / "run"
    _assert_trained(run_dir)
    logs = "".join(p.read_text() for p in sorted((tmp_path / "sweep").rglob("*_log.*")))
    assert len(re.findall(r"\[loongsage\] ray up on 2 node\(s\) of job \d+", logs)) == 1, logs[-3000:]
    assert "[loongsage] Slurm task 1: task 0 runs the controller" in logs, logs[-3000:]
    _assert_on_their_nodes(logs, run_dir, trainer_ranks=2, engines=2, attempts=1)
    _assert_weights_crossed(run_dir, steps=2)
    _assert_relayed_on_node2(run_dir, engines=2)


def test_an_sglang_engine_spanning_both_nodes(two_nodes, tmp_path):
    """roles.rollout.tp=2 with one GPU a node: the engine spans node1 and node2 (SGLang's
    --nnodes 2), node rank 0 on node1 serving, node rank 1 on node2 joining it at the
    --dist-init-addr from the job's port block; colocated with a trainer rank on each node."""
    server = REPO_ROOT / "tests" / "slurm" / "serve_embedded_showing_devices.py"
    layout = [
        "cluster.nodes=2",
        "cluster.gpus_per_node=1",
        "run.placement=colocate",
        "rollout.engine=sglang",
        f"rollout.sglang.command=[{sys.executable},{server}]",
        "roles.trainer.gpus=2",
        "roles.rollout.gpus=2",
        "roles.rollout.tp=2",
        "trainer.world_size=2",
        "trainer.micro_batch_size=2",
    ]
    result = _launch_on_slurm(tmp_path, *layout, MOVING)
    assert result.returncode == 0, result.stderr[-4000:]
    run_dir = tmp_path / "run"
    _assert_trained(run_dir)
    logs = "".join(p.read_text() for p in sorted((tmp_path / "sweep").rglob("*_log.*")))
    assert re.search(rf"rollout\[0\]: {NODES['node1']} GPU \d", logs), logs[-4000:]
    assert re.search(rf"rollout\[0\] node rank 1: {NODES['node2']} GPU \d", logs), logs[-4000:]
    head, node1 = (run_dir / "engines" / "engine-0.log").read_text(), (run_dir / "engines" / "engine-0-node1.log").read_text()
    addr = re.search(r"--dist-init-addr (\S+)", head).group(1)
    assert addr.startswith(f"{NODES['node1']}:") and "--nnodes 2 --node-rank 0" in head, head[-3000:]
    assert (int(addr.rsplit(":", 1)[1]) - FIRST_PORT) % PORTS_PER_JOB >= FIRST_ENGINE_PORT, addr  # the job's block
    assert "--node-rank 1" in node1 and "node rank 1 of 2 joined node rank 0" in node1, node1[-3000:]
    # each node rank saw one device of its own node
    assert re.findall(r"^CUDA_VISIBLE_DEVICES=(\S+)$", head, re.MULTILINE)[:1] == ["0"], head[-2000:]
    assert len(re.findall(r"^CUDA_VISIBLE_DEVICES=(\S+)$", node1, re.MULTILINE)[0].split(",")) == 1, node1[-2000:]
    _assert_weights_crossed(run_dir, steps=2)


def _assert_relayed_on_node2(run_dir, engines: int) -> None:
    """The mesh's cross-node route: one copy over gloo into a relay on node2, which hands it to
    every engine there over shared memory."""
    plan = json.loads((run_dir / "transfer_plan.json").read_text())
    relays = [e for e in plan["endpoints"] if e["role"] == "relay"]
    assert len(relays) == 1 and relays[0]["url"].startswith(f"http://{NODES[ENGINE_NODE]}:"), plan
    name = relays[0]["name"]
    routes = sorted((r["sender"], r["receiver"], r["transport"]) for r in plan["routes"])
    assert routes == sorted([("trainer/0", name, "gloo"), *[(name, f"engine/{i}", "shm") for i in range(engines)]]), routes
    logged = scalars(run_dir)
    assert set(logged["transfer/bytes/gloo"].values()) == set(logged["transfer/bytes"].values())  # only gloo left node1


def test_two_node_job_is_requeued_and_resumes_on_both_nodes(two_nodes, tmp_path):
    """The preemption test's run (one trainer rank, one engine) with one fake GPU a node: the
    trainer on node1, the engine on node2, both attempts of the job across the two nodes."""
    logs, job_id = requeue_under_submitit(two_nodes, tmp_path, *TWO_NODES, "cluster.gpus_per_node=1")
    run_dir = tmp_path / f"slurm-{job_id}"
    _assert_resumed_once(logs, run_dir)
    _assert_on_their_nodes(logs, run_dir, trainer_ranks=1, engines=1, attempts=2)
    _assert_weights_crossed(run_dir, steps=len(scalars(run_dir)["train/loss"]))


def _assert_on_their_nodes(logs: str, run_dir, trainer_ranks: int, engines: int, attempts: int) -> None:
    # Every attempt brought Ray up on both nodes, each at its own Slurm address.
    nodes_line = "[loongsage] ray nodes: " + ", ".join(f"{node} {ip}" for node, ip in NODES.items())
    assert logs.count(nodes_line) == attempts, logs[-4000:]
    # The placement pinned each role to its node (placement groups on `node:<ip>`).
    seats = re.findall(r"^\s+(trainer|rollout)\[(\d+)\]: (\S+) GPU", logs, re.MULTILINE)
    assert sorted(set(seats)) == sorted(
        [("rollout", str(i), NODES[ENGINE_NODE]) for i in range(engines)]
        + [("trainer", str(i), NODES[TRAINER_NODE]) for i in range(trainer_ranks)]
    ), logs[-4000:]
    assert len(seats) == attempts * (trainer_ranks + engines), logs[-4000:]
    # And the engines really served on node2's address, the weights' source was on node1's.
    plan = json.loads((run_dir / "transfer_plan.json").read_text())
    host = {e["name"]: e["host"] for e in plan["endpoints"]}
    by_role = {role: [e for e in plan["endpoints"] if e["role"] == role] for role in ("source", "engine")}
    # Every trainer rank holds a replica once a push gathers the weights: each is a source.
    assert [e["host"] for e in by_role["source"]] == [NODES[TRAINER_NODE]] * trainer_ranks, plan
    assert [urlparse(e["url"]).hostname for e in by_role["engine"]] == [NODES[ENGINE_NODE]] * engines, plan
    # Every engine is fed, and the weights leave node1 for node2 (straight or through a relay there).
    assert {r["receiver"] for r in plan["routes"]} >= {e["name"] for e in by_role["engine"]}, plan
    across = (NODES[TRAINER_NODE], NODES[ENGINE_NODE])
    crossing = [r for r in plan["routes"] if (host[r["sender"]], host[r["receiver"]]) == across]
    assert crossing and all(r["link"] != "host_shm" for r in crossing), plan


def _assert_weights_crossed(run_dir, steps: int) -> None:
    logged = scalars(run_dir)
    assert sorted(logged["train/mismatch_k3_kl"]) == list(range(1, steps + 1))
    # The weights changed every step, and after every step's push the engines on node2 held them:
    # trainer and engines agree on the sampled tokens' log-probs.
    assert all(logged["train/grad_norm"][step] > 0 for step in logged["train/grad_norm"]), logged["train/grad_norm"]
    assert max(logged["train/mismatch_k3_kl"].values()) < K3_BOUND, logged["train/mismatch_k3_kl"]
    assert all(logged["transfer/bytes"][step] > 0 for step in logged["transfer/bytes"]), logged["transfer/bytes"]
    assert all(value == 0 for value in logged["transfer/failed_receivers"].values()), logged["transfer/failed_receivers"]
    # Each step's samples came from the weights the step before pushed (sync: version = step - 1).
    versions: dict[int, set[int]] = {}
    for line in (run_dir / "rollouts.jsonl").read_text().splitlines():
        sample = json.loads(line)
        versions.setdefault(sample["step"], set()).add(sample["weight_version"])
    assert versions == {step: {step - 1} for step in range(1, steps + 1)}, versions
