"""SGLang-protocol HTTP front end of the embedded engine (FastAPI + uvicorn in a thread)."""

from __future__ import annotations

import asyncio
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response

from loongsage.http_server import AppServer
from loongsage.inference.embedded.engine import Engine, GenerationFailed
from loongsage.inference.embedded.memory import parse_tags
from loongsage.inference.embedded.protocol import BadRequest
from loongsage.inference.embedded.scheduler import Unavailable
from loongsage.inference.embedded.staging import received_message
from loongsage.inference.embedded.update_session import SessionRefused, UpdateSession
from loongsage.inference.embedded.weight_group import GroupFailed, WeightGroups
from loongsage.inference.embedded.weights import WeightError
from loongsage.inference.weight_wire.shm_segments import ATTACHED
from loongsage.inference.weight_wire.unpack import open_named_tensors
from loongsage.json_input import JsonInputError, parse_json, read_json

log = logging.getLogger(__name__)

HEALTH_GENERATE_TIMEOUT_S = 30.0
# A /generate body is token ids or text: max_running prompts of max_context tokens fit many times
# over. (Weight updates carry tensors inline and are not held to it.)
GENERATE_MAX_BODY_BYTES = 64 * 2**20
PAUSE_MODES = ("abort", "retract", "in_place")


def build_app(engine: Engine) -> FastAPI:
    app = FastAPI(title="LoongSage embedded engine")
    groups = WeightGroups(engine)
    session = UpdateSession()
    # Tensor updates are copied into the staged weights on this one thread: the buckets of a push
    # come one at a time, and one thread keeps one OpenMP team (see engine._load_off_thread).
    receiver = ThreadPoolExecutor(max_workers=1, thread_name_prefix="engine-weights")
    app.router.on_shutdown.append(lambda: receiver.shutdown(wait=False))

    @app.exception_handler(BadRequest)
    async def bad_request(_: Request, exc: BadRequest):
        return JSONResponse(exc.to_json(), status_code=exc.status)

    @app.exception_handler(Unavailable)
    async def unavailable(_: Request, exc: Unavailable):
        return JSONResponse({"error": {"message": str(exc)}}, status_code=503)

    @app.exception_handler(SessionRefused)
    async def session_refused(_: Request, exc: SessionRefused):
        return JSONResponse({"success": False, "message": str(exc)}, status_code=400)

    @app.post("/generate")
    async def generate(request: Request):
        body = await _json_body(request, GENERATE_MAX_BODY_BYTES)
        try:
            return await engine.generate(body)
        except (BadRequest, Unavailable):
            raise
        except GenerationFailed as exc:
            return _server_error(str(exc), exc.rid)
        except Exception as exc:
            # Answered here rather than left to Starlette, whose 500 is followed by uvicorn closing
            # the connection under a client that may already be reusing it for another request.
            log.exception("/generate failed")
            return _server_error(f"engine error: {type(exc).__name__}: {exc}")

    @app.get("/health")
    async def health():
        return Response(status_code=200)

    @app.get("/health_generate")
    async def health_generate():
        probe = {"input_ids": [0], "sampling_params": {"max_new_tokens": 1, "temperature": 0}}
        try:
            await asyncio.wait_for(engine.generate(probe), HEALTH_GENERATE_TIMEOUT_S)
        except asyncio.TimeoutError:
            return JSONResponse({"error": {"message": "generation did not finish (paused?)"}}, status_code=503)
        return Response(status_code=200)

    @app.post("/flush_cache")
    async def flush_cache():
        await run_in_threadpool(engine.flush_cache)
        return {"success": True, "message": "Cache flushed."}

    @app.post("/pause_generation")
    async def pause_generation(request: Request):
        mode = _field(await _json_body(request, allow_empty=True), "mode", str, "abort")  # SGLang's default
        if mode not in PAUSE_MODES:
            raise BadRequest(f"expected one of {', '.join(PAUSE_MODES)}, got {mode!r}", "mode")
        await run_in_threadpool(engine.scheduler.pause, mode == "abort")  # retract holds like in_place
        return {"success": True}

    @app.post("/continue_generation")
    async def continue_generation():
        await run_in_threadpool(engine.scheduler.resume)
        return {"success": True}

    @app.post("/abort_request")
    async def abort_request(request: Request):
        body = await _json_body(request)
        abort_all = _field(body, "abort_all", bool, False)
        rid = _field(body, "rid", str, "")
        if not abort_all and not rid:
            raise BadRequest("give 'rid' or 'abort_all': true", "rid")
        aborted = await run_in_threadpool(engine.scheduler.abort, None if abort_all else rid)
        return {"success": True, "aborted": aborted}

    @app.get("/model_info")
    @app.get("/get_model_info")  # deprecated in SGLang, still served
    async def get_model_info():
        return engine.model_info()

    @app.get("/get_weight_version")
    async def get_weight_version():
        return {"weight_version": engine.weight_version}

    @app.get("/server_info")
    @app.get("/get_server_info")  # deprecated in SGLang, still served
    async def get_server_info():
        # tp_size as SGLang reports it: a weight sender counts the ranks each engine adds to its group.
        info = {**engine.server_info(), "tp_size": 1, "weight_update_groups": groups.names()}
        return {**info, "weight_update_session": session.selector}

    @app.post("/update_weights_from_tensor")
    async def update_weights_from_tensor(request: Request):
        body = await _json_body(request)
        session.require("update_weights_from_tensor")
        payloads = _field(body, "serialized_named_tensors", list, None)
        if payloads is None or len(payloads) != 1:
            raise BadRequest(
                "expected a list with one entry (this engine has one tensor-parallel rank)", "serialized_named_tensors"
            )
        # null (SGLang's default) and "direct": SGLang's pickled [(name, tensor)]; "shm"/"inline": ours.
        load_format = _field(body, "load_format", str, None)
        _field(body, "flush_cache", bool, True)  # the prompt cache is always dropped on an update
        version = _version(body)

        def receive() -> tuple[int, int, int]:
            with ExitStack() as stack:
                try:
                    # shm: views into the sender's segment, copied into the staged weights before answering.
                    named, owned = stack.enter_context(open_named_tensors(load_format, payloads[0]))
                except (ValueError, KeyError, TypeError, FileNotFoundError) as exc:
                    message = f"cannot unpack with load_format={load_format!r}: {exc}"
                    raise BadRequest(message, "serialized_named_tensors") from None
                # Staged until the push's bucket that carries weight_version commits them.
                try:
                    return len(named), *engine.receive_weights(named, version, owned, _copy_threads(payloads[0]))
                except WeightError as exc:
                    raise BadRequest(str(exc), exc.name) from None

        received, staged, committed = await asyncio.get_running_loop().run_in_executor(receiver, receive)
        message = received_message(received, staged, committed)
        return {"success": True, "message": message, "weight_version": engine.weight_version}

    @app.post("/update_weights_from_disk")
    async def update_weights_from_disk(request: Request):
        body = await _json_body(request)
        model_path = _field(body, "model_path", str, None)
        if not model_path:
            raise BadRequest("'model_path' is required", "model_path")
        _field(body, "load_format", str, None)
        version = _version(body)
        try:
            await _apply(engine.update_weights_from_disk, model_path, version)
        except FileNotFoundError as exc:
            raise BadRequest(str(exc), "model_path") from None
        return {"success": True, "message": f"loaded {model_path}", "weight_version": engine.weight_version}

    @app.post("/release_memory_occupation")
    async def release_memory_occupation(request: Request):
        tags = parse_tags(_field(await _json_body(request, allow_empty=True), "tags", list, None))
        await run_in_threadpool(engine.release_memory, tags)
        if "weights" in tags:
            ATTACHED.clear()  # our mappings of the senders' segments count as ours too
        return {"success": True, "message": f"released {list(tags)}", "memory_released": sorted(engine.memory.released)}

    @app.post("/resume_memory_occupation")
    async def resume_memory_occupation(request: Request):
        tags = parse_tags(_field(await _json_body(request, allow_empty=True), "tags", list, None))
        await run_in_threadpool(engine.resume_memory, tags)
        return {"success": True, "message": f"resumed {list(tags)}", "memory_released": sorted(engine.memory.released)}

    # The group calls block (on the other ranks, on the broadcasts): run off the event loop.
    @app.post("/init_weights_update_group")
    async def init_weights_update_group(request: Request):
        return await _in_group(groups.init, await _json_body(request))

    @app.post("/update_weights_from_distributed")
    async def update_weights_from_distributed(request: Request):
        body = await _json_body(request)
        session.require("update_weights_from_distributed")  # before receiving anything
        _field(body, "flush_cache", bool, True)  # the prompt cache is always dropped on an update
        return await _in_group(groups.update, body, _version(body))

    @app.post("/destroy_weights_update_group")
    async def destroy_weights_update_group(request: Request):
        return await _in_group(groups.destroy, await _json_body(request))

    # SGLang 0.5.23 takes tensor and distributed updates only inside a session (update_session).
    @app.post("/begin_weight_update")
    async def begin_weight_update(request: Request):
        return session.begin(await _json_body(request, allow_empty=True))

    @app.post("/end_weight_update")
    async def end_weight_update(request: Request):
        answer = session.end(await _json_body(request, allow_empty=True))
        # A push whose versioned bucket never came (the sender failed or gave up): the old weights stay.
        await run_in_threadpool(_end_of_push, engine)
        return answer

    return app


def _end_of_push(engine: Engine) -> None:
    engine.discard_staged("end_weight_update")  # waits for a bucket being staged
    ATTACHED.prune()  # our mappings of segments the sender has unlinked since


async def _in_group(call, *args):
    try:
        return await run_in_threadpool(call, *args)
    except GroupFailed as exc:
        return _server_error(str(exc))


async def _apply(update, *args):
    try:
        return await run_in_threadpool(update, *args)
    except WeightError as exc:
        raise BadRequest(str(exc), exc.name) from None


async def _json_body(request: Request, limit: int | None = None, allow_empty: bool = False):
    if allow_empty and not await request.body():  # SGLang clients may post no body for "all tags"
        return {}
    try:
        return await read_json(request, limit) if limit is not None else parse_json(await request.body())
    except JsonInputError as exc:
        raise BadRequest(exc.message, exc.field, exc.status) from None


def _server_error(message: str, rid: str | None = None) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "rid": rid}}, status_code=500)


def _field(body, name: str, kind: type, default):
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object", "body")
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise BadRequest(f"expected {kind.__name__}, got {type(value).__name__}", name)
    return value


def _copy_threads(payload) -> int:
    """The shm sender's hint: threads this bucket may be copied in with (it packs nothing meanwhile)."""
    hint = payload.get("copy_threads") if isinstance(payload, dict) else None
    if not isinstance(hint, int) or isinstance(hint, bool):
        return 1
    return max(1, min(hint, os.cpu_count() or 1))


def _version(body) -> str | None:
    """A string or null, as SGLang takes it (its schema answers an integer with a 422)."""
    value = body.get("weight_version") if isinstance(body, dict) else None
    if value is None or isinstance(value, str):
        return value
    raise BadRequest(f"expected a string, got {type(value).__name__}", "weight_version")


class EmbeddedServer(AppServer):
    """Serves an `Engine` on its own thread; `start()` returns the base URL once it accepts."""

    def __init__(self, engine: Engine, host: str = "127.0.0.1", port: int = 0):
        super().__init__(build_app(engine), host, port, name="engine-http")
        self.engine = engine

    def stop(self) -> None:
        super().stop()
        self.engine.stop()
