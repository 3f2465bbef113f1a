"""HTTP client for SGLang-protocol engines: the embedded CPU engine and real SGLang servers."""

from __future__ import annotations

import asyncio
import functools
import ssl
from typing import Any

import httpx

from loongsage.inference.http_pool import RetiringPool

# Idle connections are dropped before uvicorn's 5 s keep-alive closes them from its side, so a
# request never goes out on a connection the server is closing at that moment.
KEEPALIVE_S = 4.0


@functools.cache
def shared_ssl_context() -> ssl.SSLContext:
    """httpx's default verification context, made once per process: httpx makes one per client
    otherwise, loading the CA bundle each time (~17 ms measured; a weight push opens clients
    to every engine, and the agents one per engine)."""
    return httpx.create_ssl_context()


class EngineError(RuntimeError):
    def __init__(self, message: str, url: str, status: int | None = None):
        super().__init__(f"{url}: {message}" if status is None else f"{url} -> HTTP {status}: {message}")
        self.url, self.status, self.server_message = url, status, message


class EngineClient:
    def __init__(self, base_url: str, timeout: float = 600.0):
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self._pool: RetiringPool[httpx.Client] = RetiringPool(
            lambda: httpx.Client(
                base_url=self.base_url,
                timeout=timeout,
                limits=httpx.Limits(keepalive_expiry=KEEPALIVE_S),
                verify=shared_ssl_context(),
            )
        )
        self._apool: RetiringPool[httpx.AsyncClient] | None = None
        self._apool_loop: asyncio.AbstractEventLoop | None = None

    # ---- generation --------------------------------------------------------------------
    @staticmethod
    def generate_body(
        input_ids=None,
        text=None,
        sampling_params: dict | list | None = None,
        return_logprob: bool = False,
        logprob_start_len: int | None = None,
        rid: str | list[str] | None = None,
        **extra: Any,
    ) -> dict:
        """The `/generate` body; `extra` passes through any other SGLang field verbatim."""
        body: dict[str, Any] = {"sampling_params": sampling_params or {}, "return_logprob": return_logprob}
        if input_ids is not None:
            body["input_ids"] = input_ids
        if text is not None:
            body["text"] = text
        if logprob_start_len is not None:
            body["logprob_start_len"] = logprob_start_len
        if rid is not None:
            body["rid"] = rid
        return {**body, **extra}

    def generate(
        self, input_ids=None, text=None, sampling_params=None, return_logprob=False, logprob_start_len=None, rid=None, **extra
    ) -> dict | list[dict]:
        body = self.generate_body(input_ids, text, sampling_params, return_logprob, logprob_start_len, rid, **extra)
        return self._request("POST", "/generate", body)

    async def agenerate(
        self, input_ids=None, text=None, sampling_params=None, return_logprob=False, logprob_start_len=None, rid=None, **extra
    ) -> dict | list[dict]:
        body = self.generate_body(input_ids, text, sampling_params, return_logprob, logprob_start_len, rid, **extra)
        return await self._arequest("POST", "/generate", body)

    # ---- control -----------------------------------------------------------------------
    def health(self) -> bool:
        return self._probe("/health")

    def health_generate(self) -> bool:
        return self._probe("/health_generate")

    def flush_cache(self):
        return self._request("POST", "/flush_cache")

    def pause_generation(self, mode: str):
        """SGLang's modes (its default, when a body names none, is abort):
        - "abort": every request in flight ends now, its caller answered with the partial output
          and finish_reason {"type": "abort"};
        - "in_place": in-flight requests stay where they are, with their KV cache, and go on after
          /continue_generation;
        - "retract": they go back to the queue and are recomputed after /continue_generation.
        In every mode new /generate calls wait until /continue_generation."""
        return self._request("POST", "/pause_generation", {"mode": mode})

    def continue_generation(self):
        return self._request("POST", "/continue_generation", {})

    def abort_request(self, rid: str | None = None, abort_all: bool = False):
        return self._request("POST", "/abort_request", {"rid": rid or "", "abort_all": abort_all})

    def get_model_info(self) -> dict:
        return self._request("GET", "/get_model_info")

    def get_server_info(self) -> dict:
        return self._request("GET", "/get_server_info")

    def get_weight_version(self) -> str:
        """SGLang 0.5.23 reports it only in /model_info (and the deprecated /get_model_info); older
        servers have /get_weight_version, some without `weight_version` in their model info.
        Raises EngineError with status 404 when the server has none of them."""
        for path in ("/model_info", "/get_model_info"):
            try:
                info = self._request("GET", path)
            except EngineError as exc:
                if exc.status != 404:
                    raise
                continue
            if isinstance(info, dict) and "weight_version" in info:
                return info["weight_version"]
        return self._request("GET", "/get_weight_version")["weight_version"]

    def begin_weight_update(self, selector: str = "all"):
        """Opens the weight-update session outside which SGLang 0.5.23 refuses
        update_weights_from_tensor and update_weights_from_distributed (400); one per server.
        `selector`: "all", "target" or "draft" (the speculative-decoding draft model)."""
        return self._request("POST", "/begin_weight_update", {"selector": selector})

    def end_weight_update(self):
        """Closes the session (SGLang finalizes the loaded weights here)."""
        return self._request("POST", "/end_weight_update", {})

    def update_weights_from_tensor(
        self,
        serialized_named_tensors: list,
        load_format: str | None = None,
        flush_cache: bool = True,
        weight_version: str | None = None,
    ):
        body = {
            "serialized_named_tensors": serialized_named_tensors,
            "load_format": load_format,
            "flush_cache": flush_cache,
            "weight_version": weight_version,
        }
        return self._request("POST", "/update_weights_from_tensor", body)

    def update_weights_from_disk(self, model_path: str, weight_version: str | None = None, load_format: str | None = None):
        body = {"model_path": model_path, "weight_version": weight_version, "load_format": load_format}
        return self._request("POST", "/update_weights_from_disk", body)

    def init_weights_update_group(
        self, master_address: str, master_port: int, rank_offset: int, world_size: int, group_name: str, backend: str
    ):
        """Blocks until every member has joined (the sender joins as rank 0 meanwhile)."""
        body = {
            "master_address": master_address,
            "master_port": master_port,
            "rank_offset": rank_offset,
            "world_size": world_size,
            "group_name": group_name,
            "backend": backend,
        }
        return self._request("POST", "/init_weights_update_group", body)

    def update_weights_from_distributed(
        self,
        names: list[str],
        dtypes: list[str],
        shapes: list[list[int]],
        group_name: str,
        flush_cache: bool = True,
        weight_version: str | None = None,
    ):
        """Returns once the engine has received (the sender broadcasts each tensor in `names`
        order meanwhile) and loaded them."""
        body = {
            "names": names,
            "dtypes": dtypes,
            "shapes": shapes,
            "group_name": group_name,
            "flush_cache": flush_cache,
            "weight_version": weight_version,
        }
        return self._request("POST", "/update_weights_from_distributed", body)

    def destroy_weights_update_group(self, group_name: str):
        return self._request("POST", "/destroy_weights_update_group", {"group_name": group_name})

    def release_memory_occupation(self, tags: list[str] | None = None):
        """None: every tag (weights, kv_cache, and what else the engine holds)."""
        return self._request("POST", "/release_memory_occupation", {"tags": tags})

    def resume_memory_occupation(self, tags: list[str] | None = None):
        return self._request("POST", "/resume_memory_occupation", {"tags": tags})

    # ---- plumbing ----------------------------------------------------------------------
    def _probe(self, path: str) -> bool:
        try:
            return self._send("GET", path).status_code == 200
        except httpx.TransportError:
            return False

    def _request(self, method: str, path: str, body: dict | None = None):
        try:
            response = self._send(method, path, body)
        except httpx.TransportError as exc:
            raise EngineError(f"{type(exc).__name__}: {exc}", self.base_url + path) from exc
        return _decode(response)

    async def _arequest(self, method: str, path: str, body: dict | None = None):
        try:
            response = await self._asend(method, path, body)
        except httpx.TransportError as exc:
            raise EngineError(f"{type(exc).__name__}: {exc}", self.base_url + path) from exc
        return _decode(response)

    def _send(self, method: str, path: str, body: dict | None = None) -> httpx.Response:
        lease, broken = self._pool.checkout(), True  # an exception, cancellation included, counts as broken
        try:
            response = lease.client.request(method, path, json=body)
            broken = response.status_code >= 500
            return response
        finally:
            stale = self._pool.checkin(lease, broken)
            if stale is not None:
                stale.close()

    async def _asend(self, method: str, path: str, body: dict | None = None) -> httpx.Response:
        pool = self._async_pool()
        lease, broken = pool.checkout(), True
        try:
            response = await lease.client.request(method, path, json=body)
            broken = response.status_code >= 500
            return response
        finally:
            stale = pool.checkin(lease, broken)
            if stale is not None:
                await stale.aclose()

    def _async_pool(self) -> RetiringPool[httpx.AsyncClient]:
        """One pool per event loop: an AsyncClient must not cross loops."""
        loop = asyncio.get_running_loop()
        if self._apool is None or self._apool_loop is not loop:
            limits = httpx.Limits(max_connections=None, max_keepalive_connections=64, keepalive_expiry=KEEPALIVE_S)
            self._apool = RetiringPool(
                lambda: httpx.AsyncClient(
                    base_url=self.base_url, timeout=self.timeout, limits=limits, verify=shared_ssl_context()
                )
            )
            self._apool_loop = loop
        return self._apool

    def close(self) -> None:
        stale = self._pool.close()
        if stale is not None:
            stale.close()

    async def aclose(self) -> None:
        if self._apool is not None:
            stale = self._apool.close()
            self._apool = None
            if stale is not None:
                await stale.aclose()


def _decode(response: httpx.Response):
    """JSON when the server sent JSON (SGLang answers some control calls in plain text)."""
    url = str(response.request.url)
    try:
        payload = response.json()
    except ValueError:
        payload = response.text
    if response.is_success:
        return payload
    message = payload
    if isinstance(payload, dict):
        error = payload.get("error")
        message = (error.get("message") if isinstance(error, dict) else error) or payload.get("message") or payload
    raise EngineError(str(message), url, response.status_code)
