"""Show the route plan for a layout without running anything.

    python -m loongsage.cluster.topology --json > node1.json        # on each node: save its probe
    python -m loongsage.transfer.plan --topology node1.json --topology node2.json \\
        --trainer 0-7 --engines 8-15 [--engine-tp N] [--transports cuda_ipc,nccl] [--json]
    python -m loongsage.transfer.plan --synthetic 16x8 --trainer 0-7 --engines 8-127

`--topology` reads a saved model, a cluster, one node's probe or a list of nodes (repeat it for
one file per node); `--synthetic NODESxGPUS[:nvswitch|pcie][:NIC]` builds a cluster we cannot
probe (NIC: ib_ndr, ib_hdr, roce_400, roce_200, roce_100, none); with neither, this machine is
probed. Device ranges are explained in `device_slots` (GPUs in host order, then GPU index; on
CPU-only hosts `--cpu-slots` processes each). Prints Plan.render(), or the plan as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys

from loongsage.cluster.topology import gather, probe_node
from loongsage.transfer.device_slots import engines_at, parse_slots, sources_at
from loongsage.transfer.planner import plan_routes
from loongsage.transfer.routes import Plan
from loongsage.transfer.topology_model import TopologyModel


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        plan = build_plan(args)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(plan.to_dict(), indent=2) if args.json else plan.render())
    return 0


def build_plan(args: argparse.Namespace) -> Plan:
    topology = _topology(args)
    sources = sources_at(parse_slots(args.trainer, topology, args.cpu_slots))
    engines = engines_at(parse_slots(args.engines, topology, args.cpu_slots), args.engine_tp)
    transports = [t.strip() for t in args.transports.split(",") if t.strip()] if args.transports else None
    return plan_routes(topology, sources, engines, transports)


def _topology(args: argparse.Namespace) -> TopologyModel:
    if args.topology and args.synthetic:
        raise ValueError("--topology and --synthetic: give one of them")
    if args.topology:
        return TopologyModel.load(args.topology)
    if args.synthetic:
        return _synthetic(args.synthetic)
    return TopologyModel(gather([probe_node()]))


def _synthetic(spec: str) -> TopologyModel:
    shape, *rest = spec.split(":")
    nodes, _, gpus = shape.partition("x")
    if not nodes.isdigit() or (gpus and not gpus.isdigit()) or len(rest) > 2:
        raise ValueError(f"--synthetic {spec!r}: expected NODESxGPUS[:nvswitch|pcie][:NIC], e.g. 16x8:nvswitch:ib_ndr")
    interconnect = rest[0] if rest else "nvswitch"
    nic = rest[1] if len(rest) > 1 else "ib_ndr"
    return TopologyModel.synthetic(int(nodes), gpus_per_node=int(gpus or 8), interconnect=interconnect, nic=nic)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m loongsage.transfer.plan", description="Print the TransferMesh route plan for a layout."
    )
    parser.add_argument("--topology", action="append", help="probe or model JSON (repeat for one file per node)")
    parser.add_argument("--synthetic", help="NODESxGPUS[:nvswitch|pcie][:NIC] instead of a probe, e.g. 16x8")
    parser.add_argument("--trainer", required=True, help="devices of the trainer ranks (sources), e.g. 0-7 or node0:0-7")
    parser.add_argument("--engines", required=True, help="devices of the engines, e.g. 8-15 or node1:0-7,node2:0-7")
    parser.add_argument("--engine-tp", type=int, default=1, help="devices per engine (consecutive in --engines)")
    parser.add_argument("--transports", help="comma-separated transports the plan may use (default: all)")
    parser.add_argument("--cpu-slots", type=int, default=4, help="process slots per CPU-only host (default 4)")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    return parser


if __name__ == "__main__":
    sys.exit(main())
