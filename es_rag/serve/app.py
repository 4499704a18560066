"""``es-rag serve``: the query side as a long-lived HTTP service (FastAPI on uvicorn).

One ``Service`` per process holds the engine client, the analyzer, the model (behind the
micro-batching embedder), the reranker and the key store; it warms them before the
process reports ready. Every route that touches documents authenticates first: the
tenant and principals come from the credential (``identity``), never from the request.

Work that blocks (the search server, the model) runs in the thread pool, under the request
timeout; errors become one JSON object ``{"error": {"type", "reason"}, "status"}`` with a
4xx status, or 503 with ``Retry-After`` when a dependency is down or the service is
saturated. A stack trace never leaves the process.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractContextManager, asynccontextmanager, nullcontext
from datetime import datetime, timezone
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar

import anyio.to_thread
from fastapi import Depends, FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from es_rag import __version__
from es_rag.analysis import TextAnalyzer
from es_rag.config import Settings
from es_rag.embedding import build_embedder
from es_rag.engine.client import make_engine
from es_rag.errors import (
    AccessControlError,
    AclGuardError,
    AnalyzerMismatchError,
    EmbeddingError,
    EsRagError,
    IndexContractError,
    TransientError,
)
from es_rag.query.context import ContextBuilder, ContextResult
from es_rag.query.search import Searcher
from es_rag.query.strategies import resolve
from es_rag.serve import models as m
from es_rag.serve.batching import BatchingEmbedder, OverloadedError
from es_rag.serve.dsl import DslError
from es_rag.serve.es_api import (
    Compat,
    IndexNotFound,
    es_error_body,
    index_not_found,
    parse_json,
    parse_ndjson,
    root_info,
)
from es_rag.serve.identity import Authenticator, Forbidden, Identity, Unauthorized
from es_rag.serve.keys import KeyStore
from es_rag.serve.limits import RateLimiter, retry_after
from es_rag.serve.metrics import Metrics
from es_rag.types import SearchResponse

log = logging.getLogger("es_rag.serve")
access_log = logging.getLogger("es_rag.access")
T = TypeVar("T")


class LimitError(EsRagError):
    """A request over one of the service's caps (400)."""


class RateLimited(EsRagError):
    """The credential's rate is spent (429)."""

    def __init__(self, wait_s: float) -> None:
        super().__init__(f"rate limit reached; retry in {wait_s:.2f} s")
        self.wait_s = wait_s


class RequestTimeout(EsRagError):
    """The request ran past ES_RAG_SERVE_REQUEST_TIMEOUT (408)."""


def error_status(exc: EsRagError) -> tuple[int, dict[str, str]]:
    """The HTTP status and extra headers of one of es-rag's errors."""
    if isinstance(exc, Unauthorized):
        return 401, {"WWW-Authenticate": 'ApiKey realm="es-rag", Bearer realm="es-rag"'}
    if isinstance(exc, Forbidden):
        return 403, {}
    if isinstance(exc, IndexNotFound):
        return 404, {}
    if isinstance(exc, RateLimited):
        return 429, {"Retry-After": retry_after(exc.wait_s)}
    if isinstance(exc, RequestTimeout):
        return 408, {}
    if isinstance(exc, OverloadedError):
        return 503, {"Retry-After": "1"}
    if isinstance(exc, TransientError | IndexContractError | AnalyzerMismatchError):
        return 503, {"Retry-After": "5"}
    if isinstance(exc, AclGuardError | EmbeddingError):
        return 500, {}  # a bug or a broken model, not the caller's doing
    return 400, {}


def error_response(
    status: int, kind: str, reason: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    body = {"error": {"type": kind, "reason": " ".join(reason.split())}, "status": status}
    return JSONResponse(body, status_code=status, headers=headers)


class Service:
    """Everything one serving process holds. Construction does no I/O."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.metrics = Metrics()
        self.engine = make_engine(settings)
        self.analyzer = TextAnalyzer(settings.analyzer_language)
        self.model = build_embedder(settings)
        self.embedder = BatchingEmbedder(
            self.model,
            max_batch=settings.serve_batch_size,
            wait_ms=settings.serve_batch_wait_ms,
            max_pending=settings.serve_max_pending,
            timeout=settings.serve_request_timeout,
            on_batch=self.metrics.embedding_batch.observe,
        )
        self.searcher = Searcher(
            settings, client=self.engine, embedder=self.embedder, analyzer=self.analyzer
        )
        self.contexts = ContextBuilder(self.searcher)
        self.keys = KeyStore(
            self.engine,
            settings.keys_index,
            cache_seconds=settings.keys_cache_seconds,
            case_sensitive=settings.principal_case_sensitive,
        )
        self.auth = Authenticator(settings, self.keys)
        self.limiter = RateLimiter()
        self.model_ready = False
        self._ingest: Any = None
        self._celery: Any = None
        self._lock = threading.Lock()

    def warm(self) -> None:
        """Load the model (and reranker), read the analyzer's dictionaries, probe the server.

        A search server that is down now does not stop the service: /readyz says so, and
        the first request after it is back finds it.
        """
        self.model.embed_query("warm-up")
        self.analyzer.analyze("warm-up")
        self.contexts.count_tokens("warm-up")
        if self.settings.rerank_model:
            self.searcher.reranker  # noqa: B018  (loads it)
        self.model_ready = True
        try:
            self.keys.ensure()
            self.searcher.cluster()
            self.searcher.contract()
        except EsRagError as exc:
            log.warning("not ready yet: %s: %s", type(exc).__name__, exc)

    def search(self, query: str, **kwargs: Any) -> SearchResponse:
        with self._announced(kwargs.get("strategy")):
            result = self.searcher.search(query, **kwargs)
        self._count_fallback(kwargs.get("rerank"), result.reranked)
        return result

    def context(self, query: str, **kwargs: Any) -> ContextResult:
        with self._announced(kwargs.get("strategy")):
            result = self.contexts.build(query, **kwargs)
        self._count_fallback(kwargs.get("rerank"), result.reranked)
        return result

    def _count_fallback(self, asked: bool | None, reranked: bool | None) -> None:
        """A rerank asked for (or on by default) that kept the fused order."""
        if asked is not False and reranked is False:
            self.metrics.rerank_fallbacks.inc()

    def _announced(self, strategy: str | None) -> AbstractContextManager[None]:
        """Tell the batcher a query vector is coming, when the strategy needs one (a
        ``bm25`` search must not make the batcher wait for it)."""
        try:
            chosen, _ = resolve(strategy, self.settings, self.searcher.cluster)
        except EsRagError:
            return nullcontext()  # the search itself will say what is wrong
        return self.embedder.expecting() if chosen.uses_vector else nullcontext()

    def readiness(self) -> dict[str, str]:
        checks: dict[str, str] = {"model": "ok" if self.model_ready else "loading"}
        try:
            self.engine.node()
            checks["engine"] = "ok"
        except EsRagError as exc:
            checks["engine"] = f"{type(exc).__name__}: {exc}"
            return checks
        try:
            self.searcher.check_vectors()
            checks["index"] = "ok"
        except EsRagError as exc:
            checks["index"] = f"{type(exc).__name__}: {exc}"
        return checks

    @property
    def ingestor(self) -> Any:
        from es_rag.pipeline import Ingestor

        with self._lock:
            if self._ingest is None:
                self._ingest = Ingestor(
                    self.settings, client=self.engine, embedder=self.model, analyzer=self.analyzer
                )
            return self._ingest

    @property
    def celery(self) -> Any:
        from workers.app import make_app

        with self._lock:
            if self._celery is None:
                self._celery = make_app(self.settings)
            return self._celery

    def close(self) -> None:
        self.embedder.close()
        self.engine.close()


# --- the body-size cap, before anything reads the body ---------------------------------------
_FORM = b"application/x-www-form-urlencoded"


class BodyLimit:
    """Answers 413 to a body over ``limit`` bytes, whether it announces its length or
    streams; what is under the limit is read here once and replayed to the application."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_large = error_response(
            413, "body_too_large", f"the request body is larger than {self.limit} bytes"
        )
        for name, value in scope.get("headers", []):
            if name == b"content-length" and (not value.isdigit() or int(value) > self.limit):
                await too_large(scope, receive, send)
                return
        # Every body here is JSON: ``curl -d`` (form-encoded by default) works without -H.
        scope["headers"] = [
            (n, b"application/json" if n == b"content-type" and v.startswith(_FORM) else v)
            for n, v in scope.get("headers", [])
        ]
        chunks: list[bytes] = []
        size, more = 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                break  # the client went away; the application will see it too
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            more = message.get("more_body", False)
            if size > self.limit:
                await too_large(scope, receive, send)
                return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


class Observe:
    """Every request: the access log line, the request metrics, and a JSON 500 for an error
    that escaped every handler. Plain ASGI: Starlette's ``BaseHTTPMiddleware`` costs a
    task and a stream per request."""

    def __init__(self, app: ASGIApp, service: Service) -> None:
        self.app = app
        self.service = service

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        status = 500
        started = False

        async def sending(message: Message) -> None:
            nonlocal status, started
            if message["type"] == "http.response.start":
                status, started = message["status"], True
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception:
            log.exception("unhandled error on %s %s", scope.get("method"), scope.get("path"))
            if not started:
                await error_response(500, "internal_error", "see the service log")(
                    scope, receive, send
                )
            status = 500
        self._record(scope, status, time.perf_counter() - t0)

    def _record(self, scope: Scope, status: int, elapsed: float) -> None:
        state = scope.get("state") or {}
        route = getattr(scope.get("route"), "path", None) or "other"
        strategy = state.get("strategy", "")
        metrics = self.service.metrics
        metrics.requests.labels(route, strategy, str(status)).inc()
        if route != "other":
            metrics.latency.labels(route, strategy).observe(elapsed)
        who: Identity | None = state.get("identity")
        line: dict[str, Any] = {
            "ts": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
            "method": scope.get("method"),
            "route": route,
            "status": status,
            "latency_ms": round(elapsed * 1000, 2),
            "key_id": who.subject if who else None,
            "auth": who.kind if who else None,
            "tenant": who.tenant if who else None,
            "strategy": strategy or None,
        }
        if self.service.settings.serve_log_text and "query" in state:
            line["query"] = state["query"]
        access_log.info(json.dumps(line, ensure_ascii=False))


def create_app(settings: Settings | None = None) -> FastAPI:
    """The ASGI application (``uvicorn --factory es_rag.serve.app:create_app``)."""
    s = settings or Settings()
    service = Service(s)
    _configure_access_log()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Searches wait on the network, not the CPU: more threads than the default 40 keep
        # a burst from queueing in front of the pending-embedding cap.
        anyio.to_thread.current_default_thread_limiter().total_tokens = max(64, s.serve_max_pending)
        await run_in_threadpool(service.warm)
        log.info("es-rag serve ready on %s (index %s)", s.es_url, s.index)
        yield
        await run_in_threadpool(service.close)

    app = FastAPI(
        title="es-rag",
        version=__version__,
        summary="Permission-aware hybrid retrieval for RAG on Elasticsearch and OpenSearch.",
        lifespan=lifespan,
        responses={
            401: {"model": m.ErrorResponse, "description": "no valid credential"},
            403: {"model": m.ErrorResponse, "description": "outside the key's role or aliases"},
            429: {"model": m.ErrorResponse, "description": "rate limit (Retry-After)"},
            503: {"model": m.ErrorResponse, "description": "dependency down or saturated"},
        },
    )
    app.state.service = service
    app.add_middleware(BodyLimit, limit=s.serve_max_body_bytes)  # inside the access log

    async def within(fn: Callable[[], T]) -> T:
        """Run blocking work in the thread pool, under the request timeout."""
        try:
            # A deadline on the scope, not a task per request (asyncio.wait_for);
            # abandon_on_cancel: a timed-out search must not hold the answer back until it
            # ends; its thread finishes on its own and its result is dropped.
            with anyio.fail_after(s.serve_request_timeout):
                return await anyio.to_thread.run_sync(fn, abandon_on_cancel=True)
        except TimeoutError:
            service.metrics.rejections.labels("timeout").inc()
            raise RequestTimeout(
                f"the request took longer than {s.serve_request_timeout:g} s"
            ) from None

    def authenticated(
        action: str | None, *, alias: bool = True
    ) -> Callable[[Request], Awaitable[Identity]]:
        """The caller, allowed ``action`` (None: any role) on the served alias (``alias``
        False: the route resolves the names it is given itself, answering 404)."""

        async def dependency(request: Request) -> Identity:
            header = request.headers.get("authorization")
            try:
                if service.auth.needs_io(header):
                    who = await within(lambda: service.auth.identify(header))
                else:
                    who = service.auth.identify(header)
            except Unauthorized:
                service.metrics.auth_failures.labels("401").inc()
                raise
            request.state.identity = who
            try:
                if action is not None:
                    who.require(action, s.index if alias else None)
            except Forbidden:
                service.metrics.auth_failures.labels("403").inc()
                raise
            wait = service.limiter.take(who.subject, who.rate_limit or s.serve_rate_limit)
            if wait is not None:
                service.metrics.rejections.labels("rate").inc()
                raise RateLimited(wait)
            return who

        return dependency

    def check_query(request: Request, query: str, k: int | None) -> None:
        if s.serve_log_text:
            request.state.query = query
        if not query.strip():
            raise LimitError("the query is empty")
        if len(query) > s.serve_max_query_chars:
            raise LimitError(f"the query is longer than {s.serve_max_query_chars} characters")
        if k is not None and k > s.serve_max_k:
            raise LimitError(f"k is at most {s.serve_max_k}")

    # --- errors --------------------------------------------------------------------------
    @app.exception_handler(EsRagError)
    async def on_error(request: Request, exc: EsRagError) -> Response:
        status, headers = error_status(exc)
        if isinstance(exc, OverloadedError | LimitError):
            kind = "backpressure" if isinstance(exc, OverloadedError) else "limit"
            service.metrics.rejections.labels(kind).inc()
        if status == 500:
            log.error("internal error on %s: %s: %s", request.url.path, type(exc).__name__, exc)
            return error_response(500, "internal_error", "see the service log")
        if ES_PATH.match(request.url.path):
            return es_error(exc, status, headers)
        return error_response(status, _snake(type(exc).__name__), str(exc), headers)

    # --- probes --------------------------------------------------------------------------
    @app.get("/healthz", tags=["probes"])
    async def healthz() -> dict[str, str]:
        """The process is up (it says nothing about the search server)."""
        return {"status": "ok"}

    @app.get(
        "/readyz",
        tags=["probes"],
        response_model=m.Readiness,
        responses={503: {"model": m.Readiness}},
    )
    async def readyz() -> Response:
        """Search server reachable, index contract matching, model loaded."""
        checks = await run_in_threadpool(service.readiness)
        ready = all(v == "ok" for v in checks.values()) and len(checks) == 3
        return JSONResponse({"ready": ready, "checks": checks}, status_code=200 if ready else 503)

    @app.get("/metrics", tags=["probes"], response_class=Response)
    async def metrics() -> Response:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return Response(generate_latest(service.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    # --- v1 --------------------------------------------------------------------------------
    @app.post("/v1/search", tags=["v1"], response_model=SearchResponse)
    async def search(
        body: m.SearchRequest,
        request: Request,
        who: Identity = Depends(authenticated("search")),  # noqa: B008
    ) -> Response:
        """The `es-rag search --json` object, for the credential's tenant and principals."""
        check_query(request, body.query, body.k)
        request.state.strategy = body.strategy or "auto"
        result = await within(
            lambda: service.search(
                body.query,
                caller=who.caller,
                k=body.k,
                strategy=body.strategy,
                filters=body.filters,
                rerank=body.rerank,
            )
        )
        request.state.strategy = result.strategy
        out = result.to_dict()
        if not body.explain:
            for hit in out["hits"]:
                hit["explain"] = {}
        return JSONResponse(out)

    @app.post("/v1/context", tags=["v1"], response_model=ContextResult)
    async def context(
        body: m.ContextRequest,
        request: Request,
        who: Identity = Depends(authenticated("search")),  # noqa: B008
    ) -> Response:
        """The `es-rag context --json` object: evidence with citations, or a refusal."""
        check_query(request, body.query, body.k)
        if body.budget_tokens is not None and body.budget_tokens > s.serve_max_budget_tokens:
            raise LimitError(f"budget_tokens is at most {s.serve_max_budget_tokens}")
        request.state.strategy = body.strategy or "auto"
        result = await within(
            lambda: service.context(
                body.query,
                caller=who.caller,
                k=body.k,
                strategy=body.strategy,
                filters=body.filters,
                rerank=body.rerank,
                expand=body.expand,
                budget_tokens=body.budget_tokens,
            )
        )
        request.state.strategy = result.strategy
        return JSONResponse(result.to_dict())

    @app.post("/v1/documents", tags=["v1"], response_model=m.DocumentsResponse, status_code=202)
    async def add_documents(
        body: m.DocumentsRequest,
        who: Identity = Depends(authenticated("ingest")),  # noqa: B008
    ) -> Response:
        """Queue files the workers can read into the credential's tenant.

        Every path must lie under ES_RAG_SERVE_INGEST_ROOTS (after resolving links); one
        that does not, or that is not a file, refuses the whole request and queues nothing.
        """
        return JSONResponse(await within(lambda: _enqueue(service, who, body)), status_code=202)

    @app.delete("/v1/documents/{doc_id:path}", tags=["v1"], response_model=m.DeletedResponse)
    async def delete_document(
        doc_id: str,
        who: Identity = Depends(authenticated("ingest")),  # noqa: B008
    ) -> dict[str, Any]:
        """Delete every chunk of one of the tenant's documents (another tenant's: 0)."""
        if not doc_id or len(doc_id) > 512:
            raise LimitError("a document id is 1 to 512 characters")
        deleted = await within(lambda: service.ingestor.delete_document(doc_id, tenant=who.tenant))
        return {"doc_id": doc_id, "tenant": who.tenant, "deleted": deleted}

    @app.get(
        "/v1/status", tags=["v1"], response_model=m.StatusResponse, response_model_exclude_none=True
    )
    async def status(
        who: Identity = Depends(authenticated("status")),  # noqa: B008
    ) -> dict[str, Any]:
        """The tenant's documents per status, its failures and orphans. Queue depth and
        workers (shared by all tenants) only for admin keys."""
        from es_rag.jobs import status_report

        report = await within(lambda: status_report(service.ingestor, tenant=who.tenant))
        out: dict[str, Any] = {
            "tenant": who.tenant,
            "counts": report["counts"],
            "failed": report["failed"],
            "orphaned": report["orphaned"],
        }
        if who.role == "admin":
            for name in ("queue_depth", "workers", "awaiting_redelivery"):
                out[name] = report[name]
        return out

    # --- the Elasticsearch-compatible surface (es_rag.serve.es_api) -----------------------
    compat = Compat(service)
    es: list[str | Enum] = ["elasticsearch-compatible"]

    @app.api_route("/", methods=["GET", "HEAD"], tags=es)
    async def root(
        request: Request,
        who: Identity = Depends(authenticated(None)),  # noqa: B008
    ) -> Response:
        """Name, cluster and a version the official 8.x and 9.x clients accept."""
        if request.method == "HEAD":
            return Response(status_code=200, media_type="application/json")
        return JSONResponse(root_info("es-rag", f"es-rag:{s.index}"))

    @app.api_route("/{target}/_search", methods=["GET", "POST"], tags=es)
    async def es_search(
        target: str,
        request: Request,
        who: Identity = Depends(authenticated("search", alias=False)),  # noqa: B008
    ) -> Response:
        """Query DSL in, es-rag's hybrid search under the key's ACL out."""
        compat.resolve(target, who)
        body = parse_json(await request.body())
        params = dict(request.query_params)
        request.state.strategy = params.get("strategy") or "auto"
        return JSONResponse(await within(lambda: compat.search(who, body, params)))

    async def msearch(request: Request, who: Identity, target: str | None) -> Response:
        if target is not None:
            compat.resolve(target, who)
        lines = parse_ndjson(await request.body())
        return JSONResponse(await within(lambda: compat.msearch(who, lines, target)))

    @app.api_route("/_msearch", methods=["GET", "POST"], tags=es)
    async def es_msearch_all(
        request: Request,
        who: Identity = Depends(authenticated("search", alias=False)),  # noqa: B008
    ) -> Response:
        """Several searches, each header naming the alias."""
        return await msearch(request, who, None)

    @app.api_route("/{target}/_msearch", methods=["GET", "POST"], tags=es)
    async def es_msearch(
        target: str,
        request: Request,
        who: Identity = Depends(authenticated("search", alias=False)),  # noqa: B008
    ) -> Response:
        """Several searches on the alias."""
        return await msearch(request, who, target)

    @app.api_route("/{target}/_count", methods=["GET", "POST"], tags=es)
    async def es_count(
        target: str,
        request: Request,
        who: Identity = Depends(authenticated("search", alias=False)),  # noqa: B008
    ) -> Response:
        """The number of hits ``_search`` would report for the same query."""
        compat.resolve(target, who)
        body = parse_json(await request.body())
        return JSONResponse(await within(lambda: compat.count(who, body)))

    @app.get("/{target}/_mapping", tags=es)
    async def es_mapping(
        target: str,
        who: Identity = Depends(authenticated("search", alias=False)),  # noqa: B008
    ) -> Response:
        """The served generation's mapping, under the alias's name."""
        compat.resolve(target, who)
        return JSONResponse(await within(compat.mapping))

    @app.api_route("/{target}", methods=["GET", "HEAD"], tags=es)
    async def es_index(
        target: str,
        request: Request,
        who: Identity = Depends(authenticated("search", alias=False)),  # noqa: B008
    ) -> Response:
        """The alias as an index (``indices.exists``, ``indices.get``)."""
        compat.resolve(target, who)
        if request.method == "HEAD":
            return Response(status_code=200, media_type="application/json")
        mapping = await within(compat.mapping)
        return JSONResponse(
            {name: {"aliases": {}, **m, "settings": {}} for name, m in mapping.items()}
        )

    @app.get("/{target}/_doc/{chunk_id}", tags=es)
    async def es_get(
        target: str,
        chunk_id: str,
        request: Request,
        who: Identity = Depends(authenticated("search", alias=False)),  # noqa: B008
    ) -> Response:
        """One chunk by id (a result's detail page), under the key's ACL."""
        compat.resolve(target, who)
        params = dict(request.query_params)
        found = await within(lambda: compat.get(who, chunk_id, params))
        if found is None:
            missing = {"_index": compat.alias, "_id": chunk_id, "found": False}
            return JSONResponse(missing, status_code=404)
        return JSONResponse(found)

    @app.api_route("/{target}/_field_caps", methods=["GET", "POST"], tags=es)
    async def es_field_caps(
        target: str,
        request: Request,
        who: Identity = Depends(authenticated("search", alias=False)),  # noqa: B008
    ) -> Response:
        """Fields, their types and whether they filter and aggregate."""
        compat.resolve(target, who)
        fields = request.query_params.get("fields")
        body = parse_json(await request.body()) or {}
        if fields is None and isinstance(body.get("fields"), list | str):
            listed = body["fields"]  # the JavaScript client sends {"fields": "*"}
            fields = listed if isinstance(listed, str) else ",".join(listed)
        return JSONResponse(await within(lambda: compat.field_caps(fields)))

    if s.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=s.cors_origins,
            allow_methods=["GET", "HEAD", "POST", "DELETE", "OPTIONS"],
            allow_headers=["*"],
            expose_headers=["X-Elastic-Product", "Retry-After"],
            max_age=600,
        )
    app.add_middleware(Origins, allowed=s.cors_origins)
    app.add_middleware(Observe, service=service)  # outermost: sees every answer
    return app


# The paths of the Elasticsearch-compatible surface: its answers carry X-Elastic-Product
# and its errors Elasticsearch's shape.
ES_PATH = re.compile(
    r"^/(?:_msearch|(?!(?:healthz|readyz|metrics|docs|redoc|openapi\.json|v1)(?:/|$))"
    r"[^/]+(?:/(?:_search|_msearch|_count|_mapping|_field_caps|_doc/[^/]+))?)?$"
)
_ES_TYPES = {
    "Unauthorized": "security_exception",
    "Forbidden": "security_exception",
    "RateLimited": "es_rejected_execution_exception",
    "OverloadedError": "es_rejected_execution_exception",
    "RequestTimeout": "timeout_exception",
    "LimitError": "illegal_argument_exception",
    "FilterError": "illegal_argument_exception",
    "ConfigurationError": "illegal_argument_exception",
}


def es_error(exc: EsRagError, status: int, headers: dict[str, str]) -> JSONResponse:
    """One of es-rag's errors as Elasticsearch writes its own."""
    if isinstance(exc, IndexNotFound):
        body = index_not_found(exc.name)
    else:
        name = type(exc).__name__
        kind = exc.kind if isinstance(exc, DslError) else _ES_TYPES.get(name, _snake(name))
        body = es_error_body(status, kind, str(exc))
    return JSONResponse(body, status_code=status, headers=headers)


class Origins:
    """Browsers name the page's origin; a request from an origin that is neither the
    service's own nor allowed (ES_RAG_SERVE_CORS_ORIGINS) is refused before its credential
    is read, so a key pasted into another site's page is never accepted. The Elasticsearch
    product header goes on the Elasticsearch-compatible answers, which clients check."""

    def __init__(self, app: ASGIApp, allowed: list[str]) -> None:
        self.app = app
        self.allowed = set(allowed)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers", []))
        origin = headers.get(b"origin", b"").decode("latin-1").rstrip("/")
        if origin and origin not in self.allowed and "*" not in self.allowed:
            host = headers.get(b"host", b"").decode("latin-1")
            if origin.split("://", 1)[-1] != host:
                body = es_error_body(403, "security_exception", f"origin {origin} is not allowed")
                await JSONResponse(body, status_code=403)(scope, receive, send)
                return
        if not ES_PATH.match(scope.get("path", "")):
            await self.app(scope, receive, send)
            return

        async def product(message: Message) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (b"x-elastic-product", b"Elasticsearch")]
            await send(message)

        await self.app(scope, receive, product)


def _enqueue(service: Service, who: Identity, body: m.DocumentsRequest) -> dict[str, Any]:
    from es_rag.jobs import IngestPayload, enqueue_many

    s = service.settings
    roots = [r.resolve() for r in s.ingest_roots]
    if not roots:
        raise Forbidden("ingestion by path is off here (ES_RAG_SERVE_INGEST_ROOTS is empty)")
    payloads: list[IngestPayload] = []
    refused: list[str] = []
    for doc in body.documents:
        raw = doc.path.removeprefix("file://")
        path = Path(raw)
        if "\x00" in raw or not path.is_absolute():
            refused.append(f"{doc.path!r}: not an absolute path")
            continue
        real = path.resolve()
        if not any(real.is_relative_to(root) for root in roots):
            refused.append(f"{doc.path!r}: not under an ingest root")
            continue
        if not real.is_file():
            refused.append(f"{doc.path!r}: no such file")
            continue
        payload = IngestPayload(
            tenant=who.tenant,
            public=doc.acl.public,
            allow=doc.acl.allow,
            deny=doc.acl.deny,
            path=str(real),
            doc_id=doc.doc_id,
            doc_version=doc.doc_version,
            metadata=doc.metadata,
        )
        try:
            payload.acl(case_sensitive=s.principal_case_sensitive)
        except AccessControlError as exc:
            refused.append(f"{doc.path!r}: {exc}")
            continue
        payloads.append(payload)
    if refused:
        raise LimitError("nothing was queued: " + "; ".join(refused[:20]))
    enqueue_many(service.ingestor, service.celery, payloads, retry=False)
    return {
        "tenant": who.tenant,
        "queued": [{"doc_id": p.key, "path": p.path} for p in payloads],
    }


def _snake(name: str) -> str:
    """``RateLimited`` -> ``rate_limited``: the error ``type`` clients match on."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _configure_access_log() -> None:
    """JSON lines on stderr, one per request; the level is the service's own business."""
    if not access_log.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        access_log.addHandler(handler)
        access_log.setLevel(logging.INFO)
        access_log.propagate = False
