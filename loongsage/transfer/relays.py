"""Node relays: on a host that holds no copy of the weights, whether to bring them in once through
relays and fan them out inside the host, or to send each engine its own copy.

A GPU host with active RDMA NICs gets one relay per NIC some GPU sends through, on the GPU
nearest that NIC (DGX H100: 8 relays on GPUs 0..7, the two storage NICs stay idle); every NIC
then brings in a share, and the shares spread over NVLink. A host that crosses to the others
over TCP gets one relay (TCP has one port to fill); on a CPU host the relay is a CPU process and
the fan-out is shm. A host with one engine and one NIC gets no relay (it would add a hop and no
bandwidth) unless more hosts wait for the weights than the sources have ports: then its relay
lets the host pass the weights on to the next one, instead of every host pulling from the
sources' few ports.
"""

from __future__ import annotations

from collections.abc import Collection

from loongsage.transfer.routes import Endpoint
from loongsage.transfer.topology_model import TopologyModel
from loongsage.transfer.transport_choice import best_option


def relay_name(host: str, index: int) -> str:
    return f"relay/{host}/{index}"


def host_relays(
    topology: TopologyModel,
    host: str,
    engines: list[Endpoint],
    sources: list[Endpoint],
    allowed: Collection[str],
    crowded: bool = False,
) -> tuple[list[Endpoint], str]:
    """(relays for the host, or [] for direct routes; a note saying why). `crowded`: more hosts
    wait for the weights than the sources have ports to send from."""
    relays, how = _candidates(topology, host, engines, allowed)
    count = f"{len(engines)} engine(s), no source"
    if len(engines) < 2 and len(relays) < 2:
        if not crowded:
            return [], f"{host}: {count}, one NIC: direct routes (a relay would add a hop and no bandwidth)"
        how += ", to pass the weights on (more hosts than source ports)"
    if not any(best_option(topology, s, relays[0], allowed) for s in sources):
        return [], f"{host}: {count}: no allowed transport reaches a relay, direct routes"
    unreached = [e.name for e in engines if not all(best_option(topology, r, e, allowed) for r in relays)]
    if unreached:
        return [], f"{host}: {count}: relays cannot reach {', '.join(unreached)} with the allowed transports, direct routes"
    fan_out = sorted({(o.transport, o.link) for r in relays for e in engines if (o := best_option(topology, r, e, allowed))})
    kinds = ", ".join(f"{transport}[{link}]" for transport, link in fan_out)
    return relays, f"{host}: {count}: {len(relays)} relay(s), {how}; fan-out {kinds}"


def _candidates(
    topology: TopologyModel, host: str, engines: list[Endpoint], allowed: Collection[str]
) -> tuple[list[Endpoint], str]:
    gpu_engines = all(e.gpus for e in engines)
    nics = topology.relay_nics(host)
    if gpu_engines and nics and "nccl" in allowed:
        relays = [Endpoint(relay_name(host, i), "relay", host, (gpu,)) for i, (_, gpu) in enumerate(nics)]
        return relays, f"one per NIC ({', '.join(nic for nic, _ in nics)})"
    if gpu_engines:
        return [Endpoint(relay_name(host, 0), "relay", host, engines[0].gpus[:1])], "one for the TCP port"
    return [Endpoint(relay_name(host, 0), "relay", host, ())], "a CPU process for the TCP port"
