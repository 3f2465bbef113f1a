"""Ray across a Slurm allocation: the head node starts the Ray head, every other node joins it
through srun, the driver waits until every node and GPU has registered, and everything is torn
down on exit or failure.

Every Ray process is started with its node's address as Slurm knows it (NodeAddr in `scontrol
show node`), not the address this machine's default route leaves by: several slurmd may run on
one machine (each with its own NodeAddr, as in the CI's two-node test cluster), and a node's Ray
must announce the address its node has. Ports come from the job id, so two jobs sharing a node
do not collide, and are checked free before use; nodes of one job that share a machine split
the job's worker ports. The end of a job's block is its engines' (HTTP and NCCL ports of
rollout.engine=sglang servers), so no Ray worker of this or another job takes a port an engine
restarts on. Pure helpers (allocation from the environment, Slurm's view of the nodes, ports,
what is missing) are apart from the process plumbing so they can be tested without Slurm.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from loongsage.config.container import check_container, command_prefix, srun_options
from loongsage.config.schema import ContainerConfig
from loongsage.logs import setup_logging

PORTS_PER_JOB = 200  # the named ports below, then Ray's worker ports, then the engines' ports
FIRST_PORT = 10000
JOB_SLOTS = (65000 - FIRST_PORT) // PORTS_PER_JOB
FIRST_WORKER_PORT = 10  # of the block
FIRST_ENGINE_PORT = 150  # of the block; Ray's workers have the 140 ports before it
PORTS_PER_ENGINE = 3  # HTTP, NCCL, and node rank 0's rendezvous (--dist-init-addr) when it spans nodes
ENGINES_PER_JOB = (PORTS_PER_JOB - FIRST_ENGINE_PORT) // PORTS_PER_ENGINE
NODE_PORTS = 6  # a non-head Ray node's own named ports: node manager ... runtime env agent
# The address Ray replaces by the machine's interface address; any other loopback address it keeps.
RAY_REWRITTEN = "127.0.0.1"

log = logging.getLogger(__name__)
# How long a start waits for its job's Ray ports to free (Ray drains up to 30 s after SIGTERM).
PORTS_FREE_WAIT_S = 45.0


@dataclass(frozen=True)
class Allocation:
    job_id: str
    nodes: tuple[str, ...]  # hostnames, head first
    gpus_per_node: int
    cpus_per_node: int

    @property
    def head(self) -> str:
        return self.nodes[0]


@dataclass(frozen=True)
class RayPorts:
    gcs: int
    node_manager: int
    object_manager: int
    client_server: int
    dashboard: int
    dashboard_agent_grpc: int
    dashboard_agent_listen: int
    metrics_export: int
    runtime_env_agent: int
    min_worker: int
    max_worker: int

    def start_args(self, head: bool) -> list[str]:
        args = [
            f"--node-manager-port={self.node_manager}",
            f"--object-manager-port={self.object_manager}",
            f"--dashboard-agent-grpc-port={self.dashboard_agent_grpc}",
            f"--dashboard-agent-listen-port={self.dashboard_agent_listen}",
            f"--metrics-export-port={self.metrics_export}",
            f"--runtime-env-agent-port={self.runtime_env_agent}",
            f"--min-worker-port={self.min_worker}",
            f"--max-worker-port={self.max_worker}",
        ]
        if head:
            args += [f"--port={self.gcs}", f"--ray-client-server-port={self.client_server}", f"--dashboard-port={self.dashboard}"]
        return args


# Slurm's warning signal reaches every process of a job step (and srun passes it on to its
# tasks); only the controller acts on it. An ignored signal stays ignored across exec.
IGNORE_USR2 = 'trap "" USR2; exec "$@"'


def ignoring_usr2(argv: list[str], name: str) -> list[str]:
    """`argv` run so that it and what it starts ignore SIGUSR2; `name` shows in bash's messages."""
    return ["bash", "-c", IGNORE_USR2, name, *argv]


def head_command(ray_args: list[str]) -> list[str]:
    """The Ray head, started here by the controller (so already inside its container)."""
    return ignoring_usr2(ray_args, "ray-head")


def worker_command(node: str, ray_args: list[str], container: ContainerConfig, workdir: str) -> list[str]:
    """The srun that starts one other node's Ray inside cluster.container."""
    payload = ignoring_usr2(ray_args, "ray-worker")
    prefix = command_prefix(container, workdir)
    if prefix:
        # The runtime's own process is in the step too: it must outlive the signal it may forward.
        payload = ignoring_usr2([*prefix, *payload], "ray-container")
    # --mem=0: the step may use the job's memory on the node without taking any of it; without it
    # the step asks for memory the controller's step already holds, and Slurm refuses to start
    # it ("Memory required by task is not available"), --overlap or not.
    return [
        "srun",
        "--nodes=1",
        "--ntasks=1",
        "--overlap",
        "--mem=0",
        "-w",
        node,
        *srun_options(container, workdir),
        *payload,
    ]


def allocation_from_env(env: dict[str, str] | None = None, expand=None) -> Allocation:
    """The Slurm allocation this process runs in, from the variables Slurm sets for a job."""
    env = dict(os.environ if env is None else env)
    missing = [key for key in ("SLURM_JOB_ID", "SLURM_JOB_NODELIST") if not env.get(key)]
    if missing:
        raise RuntimeError(f"not inside a Slurm job: {', '.join(missing)} unset (run through sbatch, srun or submitit)")
    nodes = tuple((expand or expand_hostlist)(env["SLURM_JOB_NODELIST"]))
    return Allocation(
        job_id=env["SLURM_JOB_ID"],
        nodes=nodes,
        gpus_per_node=_gpus_on_node(env),
        cpus_per_node=int(env.get("SLURM_CPUS_ON_NODE", os.cpu_count() or 1)),
    )


def check_allocation(allocation: Allocation, cluster) -> None:
    """The allocation Slurm gave must be the one `cluster.*` asks for, or the role arithmetic
    would plan for devices that are not there."""
    problems = []
    if len(allocation.nodes) != cluster.nodes:
        problems.append(
            f"cluster.nodes={cluster.nodes} but the job has {len(allocation.nodes)} node(s) ({', '.join(allocation.nodes)})"
        )
    if cluster.gpus_per_node and allocation.gpus_per_node < cluster.gpus_per_node:
        problems.append(f"cluster.gpus_per_node={cluster.gpus_per_node} but the job has {allocation.gpus_per_node} per node")
    if problems:
        raise RuntimeError(
            f"job {allocation.job_id}: "
            + "; ".join(problems)
            + f". Submit with `sbatch --nodes={cluster.nodes} --gpus-per-node={cluster.gpus_per_node} ...` "
            f"or through `python launch.py -m ... hydra/launcher=slurm`, which sizes the job from cluster.*"
        )


def expand_hostlist(hostlist: str) -> list[str]:
    """Slurm's compressed host list as names: a plain comma list directly, anything with ranges
    (`gpu[01-04,07]`) through `scontrol show hostnames`, the one parser of them we trust."""
    if "[" not in hostlist:
        return [name for name in hostlist.split(",") if name]
    out = subprocess.run(["scontrol", "show", "hostnames", hostlist], capture_output=True, text=True, check=True)
    return out.stdout.split()


def job_port_base(job_id: str) -> int:
    """The first port of this job's block, from its id."""
    return FIRST_PORT + (int("".join(ch for ch in job_id if ch.isdigit()) or 0) % JOB_SLOTS) * PORTS_PER_JOB


def ray_ports(job_id: str, slot: int = 0, slots: int = 1) -> RayPorts:
    """Ray's ports in this job's block, for the node in `slot` of the `slots` nodes of this job on
    one machine (0 of 1 but where several slurmd share a machine). Ray binds its ports on every
    interface, so nodes on one machine need ports of their own: they split the worker ports, and
    every slot but the first takes its node's named ports from the start of its share."""
    if not 0 <= slot < slots:
        raise ValueError(f"port slot {slot} of {slots}")
    base = job_port_base(job_id)
    share = (FIRST_ENGINE_PORT - FIRST_WORKER_PORT) // slots
    if share < NODE_PORTS + 2:
        raise ValueError(
            f"job {job_id} has {slots} nodes on one machine: its {FIRST_ENGINE_PORT - FIRST_WORKER_PORT} Ray "
            f"worker ports do not split among them (PORTS_PER_JOB in loongsage/cluster/bootstrap.py)"
        )
    first = base + FIRST_WORKER_PORT + slot * share
    own = [base + 1, base + 2, base + 5, base + 6, base + 7, base + 8] if slot == 0 else list(range(first, first + NODE_PORTS))
    return RayPorts(
        gcs=base,
        node_manager=own[0],
        object_manager=own[1],
        client_server=base + 3,
        dashboard=base + 4,
        dashboard_agent_grpc=own[2],
        dashboard_agent_listen=own[3],
        metrics_export=own[4],
        runtime_env_agent=own[5],
        min_worker=first if slot == 0 else first + NODE_PORTS,
        max_worker=first + share - 1,
    )


def engine_ports(job_id: str, index: int) -> tuple[int, int, int]:
    """(HTTP port, NCCL port, rendezvous port) of engine `index` in this job's block: the same on
    every start, so a restarted server answers where its clients already send."""
    if not 0 <= index < ENGINES_PER_JOB:
        raise ValueError(
            f"engine index {index}: job {job_id}'s port block holds {ENGINES_PER_JOB} engines' ports "
            f"(indices 0..{ENGINES_PER_JOB - 1}, {PORTS_PER_ENGINE} ports each, from port "
            f"{job_port_base(job_id) + FIRST_ENGINE_PORT}); more engines (rollout.num_engines) need a "
            f"larger block (PORTS_PER_JOB in loongsage/cluster/bootstrap.py)"
        )
    http = job_port_base(job_id) + FIRST_ENGINE_PORT + PORTS_PER_ENGINE * index
    return http, http + 1, http + 2


def busy_ports(ports: RayPorts, host: str = "127.0.0.1") -> list[int]:
    """The named ports something already listens on (another job, a stale Ray)."""
    named = [
        ports.gcs,
        ports.node_manager,
        ports.object_manager,
        ports.client_server,
        ports.dashboard,
        ports.dashboard_agent_grpc,
        ports.dashboard_agent_listen,
        ports.metrics_export,
        ports.runtime_env_agent,
    ]
    busy = []
    for port in named:
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((host, port))
            except OSError:
                busy.append(port)
    return busy


def missing_resources(expected: Allocation, nodes: list[dict], addresses: dict[str, str | None] | None = None) -> list[str]:
    """What has not registered yet: one line per node that is absent or short of GPUs.
    `nodes` as `ray.nodes()` gives them (only alive ones count). A Slurm node is the Ray node at
    its address (`addresses`: the one its Ray was started with, where known), else the one with
    its hostname; a Slurm node whose name is an alias (NodeName differs from NodeHostname, and
    several may share one machine's hostname) takes an alive node left unmatched."""
    addresses = addresses or {}
    left = [node for node in nodes if node.get("Alive")]
    names = {_short(host) for host in expected.nodes}
    found: dict[str, dict] = {}
    # Three passes, each taking the nodes it can: by address, by hostname, any alias left over.
    keys = (
        lambda host, node: bool(addresses.get(host)) and node.get("NodeManagerAddress") == addresses[host],
        lambda host, node: _short(node.get("NodeManagerHostname")) == _short(host),
        lambda host, node: _short(node.get("NodeManagerHostname")) not in names,
    )
    for matches in keys:
        for host in expected.nodes:
            node = next((node for node in left if host not in found and matches(host, node)), None)
            if node is not None:
                found[host] = node
                left.remove(node)
    problems = []
    for host in expected.nodes:
        gpus = found[host].get("Resources", {}).get("GPU", 0) if host in found else None
        if gpus is None:
            problems.append(f"{host}: not registered")
        elif gpus < expected.gpus_per_node:
            problems.append(f"{host}: {gpus:g} of {expected.gpus_per_node} GPUs registered")
    return problems


@dataclass(frozen=True)
class SlurmNode:
    """Where Slurm says a node is: its address (NodeAddr) and the machine it runs on (NodeHostName)."""

    addr: str
    machine: str


def parse_show_node(text: str) -> dict[str, SlurmNode]:
    """`scontrol -o show node ...` as {NodeName: SlurmNode}, one node a line of `Key=value` words."""
    found = {}
    for line in text.splitlines():
        fields = dict(word.split("=", 1) for word in line.split() if "=" in word)
        if fields.get("NodeName"):
            name = fields["NodeName"]
            found[name] = SlurmNode(fields.get("NodeAddr") or name, fields.get("NodeHostName") or name)
    return found


def slurm_nodes(nodes: tuple[str, ...]) -> dict[str, SlurmNode]:
    """Slurm's view of `nodes`; none of them where scontrol cannot tell (not installed, the
    controller unreachable, a name it does not know): each node is then its own machine, named
    as it is."""
    try:
        done = subprocess.run(["scontrol", "-o", "show", "node", ",".join(nodes)], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return parse_show_node(done.stdout) if done.returncode == 0 else {}


def node_ip(addr: str, resolve=None) -> str | None:
    """The IP a node's Ray announces, from the node's Slurm address (NodeAddr: an IP, or a name
    that resolves to one). None where that is no address the others can reach it by: 127.0.0.1,
    which Ray replaces by the machine's interface address, or a name this machine resolves to a
    loopback address (Debian's /etc/hosts maps the machine's own name to 127.0.1.1). Any other
    loopback IP given as NodeAddr is taken as it is: nodes that share a machine, each with its own."""
    try:
        return None if addr == RAY_REWRITTEN else str(ipaddress.ip_address(addr))
    except ValueError:
        pass
    try:
        ip = (resolve or socket.gethostbyname)(addr)
    except OSError:
        return None
    return None if ipaddress.ip_address(ip).is_loopback else ip


def port_slots(nodes: tuple[str, ...], where: dict[str, SlurmNode]) -> dict[str, tuple[int, int]]:
    """(slot, slots) of each node for `ray_ports`: its place among the job's nodes on its machine."""
    machine = {node: where[node].machine if node in where else node for node in nodes}
    slots = {}
    for node in nodes:
        sharing = [other for other in nodes if machine[other] == machine[node]]
        slots[node] = (sharing.index(node), len(sharing))
    return slots


@dataclass
class RayCluster:
    """The Ray processes this job started; `stop()` ends them all."""

    allocation: Allocation
    ports: RayPorts
    head_ip: str
    processes: list[subprocess.Popen] = field(default_factory=list)
    # The IP each node's Ray was started with; None where Ray found it itself.
    node_ips: dict[str, str | None] = field(default_factory=dict)
    workers: dict[str, subprocess.Popen] = field(default_factory=dict)  # node -> its `srun ray start`
    worker_argv: dict[str, list[str]] = field(default_factory=dict)  # node -> that srun's command

    def start_worker(self, node: str) -> None:
        process = subprocess.Popen(self.worker_argv[node])
        self.processes.append(process)
        self.workers[node] = process

    @property
    def address(self) -> str:
        return f"{self.head_ip}:{self.ports.gcs}"

    def stop(self) -> None:
        for process in reversed(self.processes):
            if process.poll() is None:
                process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
        # Not `ray stop`: it would end every Ray of this user on the node, other jobs' too. A
        # `ray start --block` ends its own node's processes when it is terminated.
        _forget_address(self.address)


def _wait_for_free_ports(ports: RayPorts, job_id: str) -> list[int]:
    """The ports still busy after up to PORTS_FREE_WAIT_S. A requeued job keeps its id, so its
    ports, and may start on the same node while the run before it is still ending: Ray drains
    for seconds after Slurm's SIGTERM."""
    deadline = time.monotonic() + PORTS_FREE_WAIT_S
    busy = busy_ports(ports)
    if busy:
        log.info("Ray ports %s of job %s are in use; waiting up to %.0f s for them to free", busy, job_id, PORTS_FREE_WAIT_S)
    while busy and time.monotonic() < deadline:
        time.sleep(0.5)
        busy = busy_ports(ports)
    return busy


def start_ray(
    allocation: Allocation, timeout_s: float = 300.0, ray_cmd: str | None = None, container: ContainerConfig | None = None
) -> RayCluster:
    """Start the head here and a worker on every other node (inside `container`, cluster.container;
    the controller runs in it already), then wait for all of them."""
    ray_cmd = ray_cmd or ray_cli()
    container = container or ContainerConfig()
    check_container(container)
    if len(allocation.nodes) > 1 and shutil.which("srun") is None:
        raise RuntimeError(
            f"srun is not on PATH (cluster.container.runtime={container.runtime}): the controller "
            f"starts Ray on the other {len(allocation.nodes) - 1} node(s) with srun, so a container "
            f"image needs Slurm's client, its config and the munge socket (for pyxis also its plugin)"
        )
    where = slurm_nodes(allocation.nodes)
    slots = port_slots(allocation.nodes, where)
    ports = ray_ports(allocation.job_id, *slots[allocation.head])
    busy = _wait_for_free_ports(ports, allocation.job_id)
    if busy:
        raise RuntimeError(
            f"Ray ports {busy} of job {allocation.job_id} are still in use on {socket.gethostname()} after "
            f"{PORTS_FREE_WAIT_S:.0f} s; is another Ray running here? (`ray stop`)"
        )
    ips = {node: node_ip(where[node].addr) if node in where else None for node in allocation.nodes}
    head_ip = ips[allocation.head] or routable_ip()
    ips[allocation.head] = head_ip
    # Ray's CPU count is a scheduling token here as on a laptop (actors share the node's cores),
    # so give enough for every actor to be placed even when the job asked for few CPUs.
    resources = [f"--num-gpus={allocation.gpus_per_node}", f"--num-cpus={max(allocation.cpus_per_node, 8)}"]
    # A fresh token per job: only this job's processes (which inherit the environment, srun
    # included) can talk to its Ray, even on a node another user's job shares. Ray reads the
    # mode when it is imported, so this process must not have imported it yet.
    if "ray" in sys.modules and os.environ.get("RAY_AUTH_MODE") != "token":
        raise RuntimeError(
            "start_ray must run before this process imports ray (Ray reads RAY_AUTH_MODE at "
            "import); call loongsage.cluster.ray_token.ensure_ray_token() first"
        )
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_urlsafe(32))
    cluster = RayCluster(allocation, ports, head_ip, node_ips=ips)
    try:
        cluster.processes.append(
            subprocess.Popen(
                head_command(
                    [
                        ray_cmd,
                        "start",
                        "--head",
                        "--block",
                        "--disable-usage-stats",
                        "--include-dashboard=false",
                        f"--node-ip-address={head_ip}",
                        *resources,
                        *ports.start_args(head=True),
                    ]
                )
            )
        )
        _wait_for_port(head_ip, ports.gcs, timeout_s, cluster.processes[0])
        for node in allocation.nodes[1:]:
            worker_args = [
                ray_cmd,
                "start",
                "--block",
                "--disable-usage-stats",
                f"--address={cluster.address}",
                # Unknown: Ray finds it itself (the address it leaves by towards the head).
                *([f"--node-ip-address={ips[node]}"] if ips[node] else []),
                *resources,
                *ray_ports(allocation.job_id, *slots[node]).start_args(head=False),
            ]
            cluster.worker_argv[node] = worker_command(node, worker_args, container, os.getcwd())
            cluster.start_worker(node)
        wait_for_nodes(cluster, timeout_s)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def wait_for_nodes(cluster: RayCluster, timeout_s: float) -> None:
    import ray

    # This process runs on the head node: say so, rather than let Ray guess its address (several
    # Ray nodes may share this machine, each at its own address).
    ray.init(address=cluster.address, _node_ip_address=cluster.head_ip, log_to_driver=False)
    deadline = time.monotonic() + timeout_s
    retried: set[str] = set()
    while problems := missing_resources(cluster.allocation, ray.nodes(), cluster.node_ips):
        for node, process in list(cluster.workers.items()):
            if process.poll() is None:
                continue
            if node in retried:
                raise RuntimeError(
                    f"`srun -w {node} ray start` exited with code {process.returncode} twice before all nodes registered "
                    f"({'; '.join(problems)}); srun's and Ray's messages are above in this job's log"
                )
            # Once more: a port of the job's block can be held for a moment by some connection's
            # ephemeral port (the block lies in the kernel's ephemeral range), and Ray then fails.
            log.warning(
                "`srun -w %s ray start` exited with code %s before the node registered; starting it once more",
                node,
                process.returncode,
            )
            retried.add(node)
            cluster.start_worker(node)
        if time.monotonic() > deadline:
            raise TimeoutError(f"Ray did not come up on the whole allocation within {timeout_s:.0f} s: " + "; ".join(problems))
        time.sleep(1.0)
    log.info(
        "ray nodes: %s",
        ", ".join(f"{node} {cluster.node_ips.get(node) or '(address found by Ray)'}" for node in cluster.allocation.nodes),
    )


def _wait_for_port(host: str, port: int, timeout_s: float, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"`ray start --head` exited with code {process.returncode} before listening on {host}:{port}")
        with socket.socket() as sock:
            if sock.connect_ex((host, port)) == 0:
                return
        time.sleep(0.5)
    raise TimeoutError(f"the Ray head did not listen on {host}:{port} within {timeout_s:.0f} s")


def _forget_address(address: str) -> None:
    """`ray start` records its address for later `ray.init()` calls on this machine; once this
    Ray is gone, a stale record would make them try to join a dead cluster."""
    record = Path(os.environ.get("RAY_TMPDIR", "/tmp")) / "ray" / "ray_current_cluster"
    try:
        if record.read_text().strip() == address:
            record.unlink()
    except OSError:
        pass


def routable_ip() -> str:
    """This node's address on the network other nodes reach it by (the hostname may resolve to
    127.0.0.1 through /etc/hosts). Connecting a UDP socket sends nothing."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(("10.254.254.254", 1))
            return sock.getsockname()[0]
        except OSError:
            return socket.gethostbyname(socket.gethostname())


def ray_cli() -> str:
    """The `ray` command of this Python environment (a venv need not be on PATH)."""
    beside = Path(sys.executable).parent / "ray"
    return str(beside) if beside.exists() else "ray"


def _gpus_on_node(env: dict[str, str]) -> int:
    if env.get("SLURM_GPUS_ON_NODE"):
        return int(env["SLURM_GPUS_ON_NODE"])
    visible = env.get("CUDA_VISIBLE_DEVICES", "")
    return len([d for d in visible.split(",") if d.strip()])


def _short(host: str | None) -> str:
    return (host or "").split(".")[0]


def main(argv: list[str] | None = None) -> int:
    """`python -m loongsage.cluster.bootstrap`: inside a Slurm job, bring Ray up on the whole
    allocation, print what registered, and tear it down (a check of the bootstrap path)."""
    allocation = allocation_from_env()
    cluster = start_ray(allocation)
    import ray  # only now: see start_ray

    try:
        resources = ray.cluster_resources()
        print(
            f"ray up on job {allocation.job_id}: {len(ray.nodes())} node(s) {', '.join(allocation.nodes)}; "
            f"GPU {resources.get('GPU', 0):g} CPU {resources.get('CPU', 0):g}; head {cluster.address}",
            flush=True,
        )
    finally:
        ray.shutdown()
        cluster.stop()
    return 0


if __name__ == "__main__":
    setup_logging(results_on_stdout=True)  # stdout is the line saying what registered
    raise SystemExit(main())
