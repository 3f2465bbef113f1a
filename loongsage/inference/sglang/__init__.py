"""rollout.engine=sglang: each engine is a server process (`python -m sglang.launch_server` on
GPUs, `python -m loongsage.inference.embedded` on CPUs, both taking SGLang's launch flags) that a
Ray actor launches, watches, restarts and stops.

flags: the command line and environment, pure. config: what the actor is given, checked. ports:
the engine's HTTP and NCCL ports. process: one server process and its process group. actor: the
Ray actor (SglangEngineActor), registered in loongsage/inference/engines.py.
"""
