"""`python -m loongsage.inference.embedded`: the embedded engine as a server process, taking
SGLang's `launch_server` flags so that one engine actor can start either with the same command
line (`python -m sglang.launch_server <flags>` on GPUs, this module on CPUs)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys

from loongsage.inference.embedded.engine import DTYPES, EngineConfig
from loongsage.inference.embedded.node_ranks import follow, host_rendezvous, parse_addr

log = logging.getLogger("loongsage.inference.embedded")

STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
# Flags that only mean something on GPUs: accepted so the same command line works, and reported
# back in /get_server_info as SGLang reports its server args.
RECORDED_FLAGS = (
    "tp_size",
    "ep_size",
    "enable_return_routed_experts",
    "mem_fraction_static",
    "enable_memory_saver",
    "base_gpu_id",
    "nccl_port",
    "dist_init_addr",
    "nnodes",
    "node_rank",
    "skip_server_warmup",
    "trust_remote_code",
    "disable_cuda_graph",
    "log_level",
    "host",
    "port",
    "model_path",
)


def build_parser() -> argparse.ArgumentParser:
    # allow_abbrev=False: an abbreviation SGLang would not take must not pass here either.
    parser = argparse.ArgumentParser(
        prog="python -m loongsage.inference.embedded",
        description="Serve the embedded CPU engine over SGLang's HTTP protocol (SGLang launch_server flags).",
        allow_abbrev=False,
    )
    parser.add_argument("--model-path", required=True, help="HF directory (config.json, *.safetensors)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument(
        "--tp-size", "--tp", dest="tp_size", type=int, default=1, help="1 on one node; a multiple of --nnodes across nodes"
    )
    parser.add_argument(
        "--ep-size", "--ep", dest="ep_size", type=int, default=1, help="1: the engine runs every expert in one process"
    )
    parser.add_argument("--dtype", default="auto", choices=["auto", *sorted(DTYPES)], help="auto = float32")
    parser.add_argument("--context-length", type=int, default=None, help="prompt + generated tokens per request")
    parser.add_argument("--max-running-requests", type=int, default=None, help="largest decode batch")
    parser.add_argument("--random-seed", type=int, default=None, help="for requests without their own sampling_seed")
    parser.add_argument("--weight-version", default="default", help="the version the starting weights carry")
    parser.add_argument("--mem-fraction-static", type=float, default=None, help="accepted; no meaning on CPU")
    parser.add_argument("--enable-memory-saver", action="store_true", help="accepted; memory release always works on CPU")
    parser.add_argument("--base-gpu-id", type=int, default=0, help="accepted; no meaning on CPU")
    parser.add_argument("--nccl-port", type=int, default=None, help="accepted; no meaning with one rank")
    parser.add_argument("--dist-init-addr", default=None, help="host:port where node ranks meet node rank 0 (--nnodes > 1)")
    parser.add_argument("--nnodes", type=int, default=1, help="server processes of the engine, one per node")
    parser.add_argument("--node-rank", type=int, default=0, help="0 serves HTTP; the others join it (node_ranks.py)")
    parser.add_argument("--skip-server-warmup", action="store_true", help="accepted; there is no warmup to skip")
    parser.add_argument("--log-level", default="info", type=str.lower, choices=LOG_LEVELS)
    parser.add_argument("--trust-remote-code", action="store_true", help="accepted; only Llama-family models load")
    parser.add_argument("--disable-cuda-graph", action="store_true", help="accepted; no meaning on CPU")
    parser.add_argument(
        "--enable-return-routed-experts", action="store_true", help="requests may ask for return_routed_experts (R3)"
    )
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Exits with status 2 and a message naming the flag for anything the engine cannot honour."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.nnodes < 1:
        parser.error(f"--nnodes={args.nnodes}: must be at least 1")
    if args.nnodes == 1 and args.tp_size != 1:
        parser.error(f"--tp-size={args.tp_size}: the embedded engine has one tensor-parallel rank; only 1 is accepted")
    if args.ep_size != 1:
        parser.error(f"--ep-size={args.ep_size}: the embedded engine runs every expert in one process; only 1 is accepted")
    if args.nnodes > 1 and (args.tp_size < args.nnodes or args.tp_size % args.nnodes):
        parser.error(f"--tp-size={args.tp_size}: across --nnodes={args.nnodes} it must be a multiple of the node count")
    if not 0 <= args.node_rank < args.nnodes:
        parser.error(f"--node-rank={args.node_rank}: must be in 0..{args.nnodes - 1} (--nnodes={args.nnodes})")
    if args.nnodes > 1:
        if not args.dist_init_addr:
            parser.error(f"--nnodes={args.nnodes} needs --dist-init-addr (host:port of node rank 0)")
        try:
            parse_addr(args.dist_init_addr)
        except ValueError as exc:
            parser.error(str(exc))
    for flag in ("context_length", "max_running_requests"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            parser.error(f"--{flag.replace('_', '-')}={value}: must be at least 1")
    if not 0 < args.port < 65536:
        parser.error(f"--port={args.port}: must be in 1..65535")
    return args


def engine_config(args: argparse.Namespace, environ: dict | None = None) -> EngineConfig:
    """The flags SGLang and the embedded engine share, as an EngineConfig. Threads follow
    OMP_NUM_THREADS (the engine actor sets it to the CPUs it was given), else torch's default."""
    cfg: dict = {"dtype": "float32" if args.dtype == "auto" else args.dtype, "weight_version": args.weight_version}
    if args.context_length is not None:
        cfg["max_context"] = args.context_length
    if args.max_running_requests is not None:
        cfg["max_running"] = args.max_running_requests
    if args.random_seed is not None:
        cfg["seed"] = args.random_seed
    if args.enable_return_routed_experts:
        cfg["return_routed_experts"] = True
    threads = _omp_threads(os.environ if environ is None else environ)
    if threads is not None:
        cfg["num_threads"] = threads
    return EngineConfig.from_dict(cfg)


def launch_flags(args: argparse.Namespace) -> dict:
    return {name: getattr(args, name) for name in RECORDED_FLAGS}


def _omp_threads(environ) -> int | None:
    raw = environ.get("OMP_NUM_THREADS", "").strip()
    if not raw:
        return None
    try:
        threads = int(raw)
    except ValueError:
        raise SystemExit(f"error: OMP_NUM_THREADS={raw!r} is not an integer") from None
    if threads < 1:
        raise SystemExit(f"error: OMP_NUM_THREADS={raw!r} must be at least 1")
    return threads


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    cfg = engine_config(args)
    # Blocked before any thread starts (threads inherit the mask), so the signals stay pending
    # until `sigwait` below takes them: a stop asked for during the model load ends the process
    # cleanly once loading returns, and no handler ever runs inside torch or uvicorn.
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    if args.node_rank > 0:  # a further node of an engine spanning nodes: no model, no HTTP
        return follow(args.dist_init_addr, args.nnodes, args.node_rank, STOP_SIGNALS)

    # Imported here: `--help` and flag errors answer without loading torch's model stack.
    from loongsage.inference.embedded.engine import Engine
    from loongsage.inference.embedded.server import EmbeddedServer

    try:
        engine = Engine(args.model_path, cfg, server_args=launch_flags(args))
    except Exception as exc:
        log.error("cannot load model from %s: %s: %s", args.model_path, type(exc).__name__, _one_line(exc))
        return 1
    # Held for the server's life: the other node ranks watch it to know node rank 0 lives.
    rendezvous = host_rendezvous(args.dist_init_addr, args.nnodes) if args.nnodes > 1 else None  # noqa: F841
    try:
        server = EmbeddedServer(engine, host=args.host, port=args.port)
        url = server.start()
    except Exception as exc:
        engine.stop()
        log.error("cannot serve on %s:%s: %s: %s", args.host, args.port, type(exc).__name__, _one_line(exc))
        return 1
    log.info("serving %s on %s (threads=%s)", args.model_path, url, cfg.num_threads or "torch default")
    received = signal.sigwait(STOP_SIGNALS)
    log.info("%s received; stopping", signal.Signals(received).name)
    server.stop()
    return 0


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())
