"""The probe of every node of the Ray cluster, gathered: one small Ray task pinned to each alive
node runs `topology.probe_node` there, named by that node's Ray address (the name engines' URLs
and trainer ranks carry)."""

from __future__ import annotations

from collections import Counter

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from loongsage.cluster.topology import ClusterTopology, NodeTopology, gather, probe_node

PROBE_TIMEOUT_S = 120


def probe_ray_cluster() -> ClusterTopology:
    alive = [node for node in ray.nodes() if node.get("Alive")]
    probes = [
        _probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)).remote(
            node["NodeManagerAddress"]
        )
        for node in alive
    ]
    nodes = [NodeTopology.from_dict(data) for data in ray.get(probes, timeout=PROBE_TIMEOUT_S)]
    names = Counter(node.hostname for node in nodes)
    for node in nodes:
        if names[node.hostname] > 1:  # several Ray nodes on one machine (own loopback addresses each)
            node.hostname = node.addresses[0]
    return gather(nodes)


@ray.remote(num_cpus=0)
def _probe(address: str) -> dict:
    return probe_node(addresses=[address]).to_dict()
