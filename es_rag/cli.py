"""The ``es-rag`` command: init, ingest, search, delete, info.

Contracts other tools rely on: ``search --json`` prints one JSON object; ``ingest`` prints
one line per failed input and exits non-zero if any failed, after ingesting the others;
every error is one line on stderr with a non-zero exit code.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from es_rag.config import Settings
from es_rag.errors import EsRagError as EsRagErrorType

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Permission-aware hybrid retrieval for RAG on Elasticsearch.",
    pretty_exceptions_enable=False,
)

_overrides: dict[str, Any] = {}


def _settings(**extra: Any) -> Settings:
    values = {k: v for k, v in {**_overrides, **extra}.items() if v is not None}
    try:
        return Settings(**values)
    except ValueError as exc:
        _fail(f"configuration: {exc}")


def _fail(message: str, code: int = 1) -> NoReturn:
    typer.echo(f"es-rag: error: {' '.join(message.split())}", err=True)
    raise typer.Exit(code)


def _run(fn: Any) -> Any:
    """Run ``fn``; turn es-rag's errors (and a dead server) into one line on stderr."""
    from es_rag.errors import EsRagError

    try:
        return fn()
    except EsRagError as exc:
        _fail(f"{type(exc).__name__}: {exc}")


@app.callback()
def main_options(
    es_url: Annotated[
        str | None, typer.Option(help="Elasticsearch or OpenSearch URL (ES_RAG_ES_URL)")
    ] = None,
    engine: Annotated[
        str | None, typer.Option(help="auto | elasticsearch | opensearch (ES_RAG_ENGINE)")
    ] = None,
    index: Annotated[str | None, typer.Option(help="index alias (ES_RAG_INDEX)")] = None,
    embedding_backend: Annotated[
        str | None, typer.Option(help="sentence-transformers | flag | openai")
    ] = None,
    embedding_model: Annotated[str | None, typer.Option(help="model name or path")] = None,
    embedding_url: Annotated[str | None, typer.Option(help="OpenAI-compatible server URL")] = None,
    device: Annotated[str | None, typer.Option(help="cpu, cuda, cuda:1, mps")] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="log progress details")] = False,
) -> None:
    """Settings come from ES_RAG_* environment variables; these flags override them."""
    _overrides.update(
        es_url=es_url,
        engine=engine,
        index=index,
        embedding_backend=embedding_backend,
        embedding_model=embedding_model,
        embedding_url=embedding_url,
        device=device,
    )
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, stream=sys.stderr)
    if not verbose:
        # The transport logs every failed attempt with a traceback; es-rag reports the
        # outcome itself, as one line.
        logging.getLogger("elastic_transport").setLevel(logging.ERROR)
        logging.getLogger("opensearch").setLevel(logging.CRITICAL)


@app.command()
def init() -> None:
    """Create the index and its alias (idempotent); refuse an incompatible existing index."""
    from es_rag.pipeline import Ingestor

    ingestor = Ingestor(_settings())
    name, created = _run(ingestor.init_index)
    contract = ingestor.contract()
    typer.echo(
        json.dumps(
            {
                "alias": ingestor.settings.index,
                "index": name,
                "created": created,
                "contract": asdict(contract),
            }
        )
    )


@app.command()
def ingest(
    paths: Annotated[
        list[Path],
        typer.Argument(
            help="files or folders: PDF, DOCX, PPTX, XLSX, CSV, HTML, Markdown, text, EML, "
            "images (the type is read from the content)"
        ),
    ],
    tenant: Annotated[str, typer.Option(help="tenant the documents belong to")],
    allow: Annotated[
        list[str] | None, typer.Option(help="principal allowed to read (user:u1, group:g)")
    ] = None,
    deny: Annotated[list[str] | None, typer.Option(help="principal denied even if allowed")] = None,
    public: Annotated[bool, typer.Option(help="readable by everyone in the tenant")] = False,
    doc_id: Annotated[str | None, typer.Option(help="document id (single file only)")] = None,
    meta: Annotated[list[str] | None, typer.Option(help="metadata KEY=VALUE, repeatable")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print results as JSON")] = False,
    progress: Annotated[bool, typer.Option(help="show a progress bar")] = True,
    queue: Annotated[
        bool, typer.Option("--queue", help="enqueue for the workers instead of ingesting here")
    ] = False,
    wait: Annotated[
        bool, typer.Option("--wait/--no-wait", help="with --queue: wait for every outcome")
    ] = True,
    doc_version: Annotated[
        str | None,
        typer.Option(help="document version (single file); integers are fenced: older loses"),
    ] = None,
    wait_timeout: Annotated[float, typer.Option(help="with --queue: seconds to wait")] = 3600,
) -> None:
    """Ingest files inline, or through the queue with --queue (workers: `es-rag worker`)."""
    from es_rag.acl import make_acl
    from es_rag.pipeline import Ingestor, expand_paths

    settings = _settings()
    acl = _run(
        lambda: make_acl(
            tenant,
            allow=allow or [],
            deny=deny or [],
            public=public,
            case_sensitive=settings.principal_case_sensitive,
        )
    )
    metadata: dict[str, str] = {}
    for item in meta or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            _fail(f"--meta expects KEY=VALUE, got {item!r}")
        metadata[key] = value
    ingestor = Ingestor(settings)
    if queue:
        _ingest_queued(
            ingestor,
            paths,
            acl_fields={
                "tenant": tenant,
                "public": public,
                "allow": allow or [],
                "deny": deny or [],
            },
            tenant=acl.tenant_id,
            doc_id=doc_id,
            doc_version=doc_version,
            metadata=metadata,
            wait=wait,
            as_json=as_json,
            progress=progress,
            timeout=wait_timeout,
        )
        return
    if doc_version is not None:
        _fail("--doc-version needs --queue (inline ingest versions documents by content)")
    total = sum(1 for _ in expand_paths(paths))
    bar = None
    if progress and not as_json and total > 1 and sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(total=total, unit="doc", file=sys.stderr)

    def on_result(result: Any) -> None:
        if bar is not None:
            bar.update(1)
        if result.status == "failed" and not as_json:
            typer.echo(f"FAILED {result.doc_id}: {result.error}", err=True)

    results = _run(
        lambda: ingestor.ingest_paths(
            paths, acl=acl, doc_id=doc_id, metadata=metadata, on_result=on_result
        )
    )
    if bar is not None:
        bar.close()
    failed = [r for r in results if r.status == "failed"]
    if as_json:
        typer.echo(json.dumps({"results": [r.to_dict() for r in results]}, ensure_ascii=False))
    else:
        counts = {s: sum(r.status == s for r in results) for s in ("indexed", "skipped", "failed")}
        chunks = sum(r.chunks for r in results if r.status == "indexed")
        typer.echo(
            f"{counts['indexed']} indexed ({chunks} chunks), {counts['skipped']} unchanged, "
            f"{counts['failed']} failed"
        )
    if failed:
        raise typer.Exit(1)


FINAL = ("indexed", "skipped", "failed")


def _ingest_queued(
    ingestor: Any,
    paths: list[Path],
    *,
    acl_fields: dict[str, Any],
    tenant: str,
    doc_id: str | None,
    doc_version: str | None,
    metadata: dict[str, str],
    wait: bool,
    as_json: bool,
    progress: bool,
    timeout: float,
) -> None:
    """Enqueue one task per file; with ``wait``, follow the status index until all end."""
    import time

    from es_rag import jobs
    from es_rag.errors import QueueUnavailableError
    from es_rag.pipeline import expand_paths
    from workers.app import make_app

    files = list(expand_paths(paths))
    if (doc_id or doc_version) and len(files) != 1:
        _fail("--doc-id and --doc-version name one document: give exactly one file")
    app = make_app(ingestor.settings)
    failed_now: list[dict[str, Any]] = []
    keys: list[str] = []

    def enqueue() -> None:
        for path, problem in files:
            key = doc_id or str(path)
            if problem:
                failed_now.append(
                    {"doc_id": key, "status": "failed", "error": problem, "attempts": 0}
                )
                continue
            payload = jobs.IngestPayload(
                path=str(path.resolve()),
                doc_id=key,
                doc_version=doc_version,
                metadata=metadata,
                **acl_fields,
            )
            try:
                jobs.enqueue(ingestor, app, payload, retry=False)
            except QueueUnavailableError as exc:  # the broker is down; nothing was queued
                ingestor.status.record(
                    tenant,
                    key,
                    "failed",
                    payload=payload.model_dump(),
                    attempts=0,
                    error_type=type(exc).__name__,
                    error=str(exc),
                )
                _fail(
                    f"QueueUnavailableError: cannot enqueue: Redis at "
                    f"{ingestor.settings.redis_url} is unreachable; "
                    f"{len(keys)} document(s) were queued before it failed"
                )
            keys.append(key)

    _run(enqueue)
    for row in failed_now:
        if not as_json:
            typer.echo(f"FAILED {row['doc_id']}: {row['error']}", err=True)
    if not wait:
        if as_json:
            typer.echo(json.dumps({"queued": keys, "failed": failed_now}, ensure_ascii=False))
        else:
            typer.echo(f"{len(keys)} queued, {len(failed_now)} failed")
        if failed_now:
            raise typer.Exit(1)
        return

    bar = None
    if progress and not as_json and sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(total=len(keys), unit="doc", file=sys.stderr)
    status = ingestor.status
    done: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + timeout
    next_expiry = 0.0
    while len(done) < len(keys):
        if time.monotonic() > deadline:
            _fail(
                f"gave up waiting after {timeout:g} s: {len(keys) - len(done)} document(s) not "
                "finished (is a worker running? `es-rag worker`); see `es-rag status`",
                code=2,
            )
        time.sleep(0.5)
        _run(status.refresh)
        if time.monotonic() >= next_expiry:  # stuck rows are minutes old: no need each poll
            _run(lambda: jobs.expire_stuck(ingestor))
            next_expiry = time.monotonic() + 30.0
        pending = [k for k in keys if k not in done]
        for row in _run(lambda p=pending: status.rows(doc_ids=p[:1000], tenant=tenant)):
            if row["status"] in FINAL and row["doc_id"] not in done:
                done[row["doc_id"]] = row
                if bar is not None:
                    bar.update(1)
                if row["status"] == "failed" and not as_json:
                    typer.echo(f"FAILED {row['doc_id']}: {row.get('error')}", err=True)
    if bar is not None:
        bar.close()
    rows = [done[k] for k in keys] + failed_now
    if as_json:
        out = [
            {k: r.get(k) for k in ("doc_id", "status", "reason", "chunks", "error", "attempts")}
            for r in rows
        ]
        typer.echo(json.dumps({"results": out}, ensure_ascii=False))
    else:
        counts = {s: sum(r["status"] == s for r in rows) for s in FINAL}
        chunks = sum(r.get("chunks") or 0 for r in rows if r["status"] == "indexed")
        typer.echo(
            f"{counts['indexed']} indexed ({chunks} chunks), {counts['skipped']} skipped, "
            f"{counts['failed']} failed"
        )
    if any(r["status"] == "failed" for r in rows):
        raise typer.Exit(1)


@app.command()
def worker(
    concurrency: Annotated[int, typer.Option(help="worker processes (or threads)")] = 1,
    pool: Annotated[str, typer.Option(help="prefork | solo | threads")] = "prefork",
    queues: Annotated[
        str | None, typer.Option("-Q", "--queues", help="comma list (default: ES_RAG_QUEUE)")
    ] = None,
    loglevel: Annotated[str, typer.Option(help="celery log level")] = "INFO",
) -> None:
    """Run a Celery worker of es-rag's app (same as `celery -A workers.app worker`)."""
    from workers.app import make_app

    if pool not in ("prefork", "solo", "threads"):
        _fail(f"--pool must be prefork, solo or threads, not {pool!r}")
    settings = _settings()
    # Each process runs its own model: without a cap, N processes x all cores of math
    # threads thrash. OMP_NUM_THREADS set by the user wins.
    threads = max(1, (os.cpu_count() or 1) // (concurrency if pool == "prefork" else 1))
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    celery_app = make_app(settings)
    import workers.tasks  # noqa: F401  (registers the tasks on the default app's name)

    names = queues or ",".join(settings.queues)
    celery_app.worker_main(
        [
            "worker",
            f"--concurrency={concurrency}",
            f"--pool={pool}",
            "-Q",
            names,
            f"--loglevel={loglevel}",
        ]
    )


@app.command()
def status(
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    limit: Annotated[int, typer.Option(help="failed documents listed")] = 50,
    tenant: Annotated[str | None, typer.Option(help="only this tenant's documents")] = None,
) -> None:
    """Queue depth, live workers, documents per status; failed and orphaned ones listed.

    A ``running`` row whose worker holds no lease any more is *orphaned*: its worker died,
    and a live worker hands its task back to the queue within a lease.
    """
    import redis

    from es_rag import jobs
    from es_rag.acl import normalize_tenant
    from es_rag.leases import Leases, live_processes
    from es_rag.pipeline import Ingestor

    settings = _settings()
    ingestor = Ingestor(settings)
    st = ingestor.status
    if tenant is not None:
        tenant = _run(
            lambda: normalize_tenant(tenant, case_sensitive=settings.principal_case_sensitive)
        )
    _run(lambda: jobs.expire_stuck(ingestor))
    _run(st.refresh)
    counts = _run(lambda: st.counts(tenant=tenant))
    failed = [
        {
            "tenant": r.get("tenant_id"),
            "doc_id": r["doc_id"],
            "error_type": r.get("error_type"),
            "error": r.get("error"),
            "reason": r.get("reason"),
            "attempts": r.get("attempts"),
        }
        for r in _run(lambda: st.rows(status="failed", tenant=tenant))[:limit]
    ]
    queues = settings.queues
    try:
        client = redis.Redis.from_url(settings.redis_url, socket_timeout=5)
        depth = sum(int(client.llen(q)) for q in queues)
        leases = Leases(client, lease_s=settings.worker_lease_seconds)
        live = leases.live()
        awaiting = sum(len(leases.held_by(w)) for w in leases.workers() if w not in live)
    except redis.exceptions.RedisError as exc:
        _fail(f"QueueUnavailableError: Redis at {settings.redis_url} unreachable ({exc})")
    alive = live_processes(live)
    orphaned = [
        {
            "tenant": r.get("tenant_id"),
            "doc_id": r["doc_id"],
            "worker": r.get("worker"),
            "started_at": r.get("started_at"),
        }
        for r in _run(lambda: st.rows(status="running", tenant=tenant))
        if r.get("worker") not in alive
    ]
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "queue_depth": depth,
                    "workers": len(live),
                    "counts": counts,
                    "failed": failed,
                    "orphaned": orphaned,
                    "awaiting_redelivery": awaiting,
                },
                ensure_ascii=False,
            )
        )
        return
    typer.echo(f"queue depth: {depth} ({', '.join(queues)}); live workers: {len(live)}")
    for name in ("queued", "running", "indexed", "skipped", "failed"):
        typer.echo(f"{name:>8}: {counts.get(name, 0)}")
    if orphaned or awaiting:
        typer.echo(
            f"orphaned: {len(orphaned)} running on a dead worker, {awaiting} message(s) of dead "
            f"workers; a live worker hands them back within {settings.worker_lease_seconds} s"
        )
    for row in orphaned:
        typer.echo(f"ORPHANED {row['tenant']}/{row['doc_id']} (worker {row['worker']})")
    for row in failed:
        typer.echo(
            f"FAILED {row['tenant']}/{row['doc_id']} (attempts {row['attempts']}): {row['error']}"
        )


@app.command()
def requeue(
    failed: Annotated[bool, typer.Option("--failed", help="requeue failed documents")] = False,
    since: Annotated[
        str | None, typer.Option(help="only those failed since (date or date math: now-1h)")
    ] = None,
    tenant: Annotated[str | None, typer.Option(help="only this tenant's documents")] = None,
) -> None:
    """Send failed documents back to the queue with their original payload."""
    from es_rag import jobs
    from es_rag.acl import normalize_tenant
    from es_rag.pipeline import Ingestor
    from workers.app import make_app

    if not failed:
        _fail("nothing to requeue: pass --failed")
    settings = _settings()
    ingestor = Ingestor(settings)
    celery_app = make_app(settings)
    if tenant is not None:
        tenant = _run(
            lambda: normalize_tenant(tenant, case_sensitive=settings.principal_case_sensitive)
        )
    _run(ingestor.status.refresh)
    rows = _run(lambda: ingestor.status.rows(status="failed", since=since, tenant=tenant))
    sent = []
    for row in rows:
        if not row.get("payload"):
            continue
        payload = jobs.IngestPayload.model_validate(row["payload"])
        _run(lambda p=payload: jobs.enqueue(ingestor, celery_app, p))
        sent.append(payload.key)
    typer.echo(json.dumps({"requeued": sent}, ensure_ascii=False))


CallerAs = Annotated[
    list[str] | None, typer.Option("--as", help="the caller's principal, e.g. user:u1")
]
Groups = Annotated[list[str] | None, typer.Option("--group", help="a group the caller is in")]
Roles = Annotated[list[str] | None, typer.Option("--role", help="a role the caller holds")]
Filters = Annotated[
    list[str] | None,
    typer.Option(
        "--filter",
        help="metadata filter: FIELD=V, FIELD=V1|V2, FIELD>=V, FIELD<V, FIELD? "
        "(e.g. metadata.product=hr, page_start>=3, updated_at>=now-30d)",
    ),
]
Strategy = Annotated[
    str | None,
    typer.Option(
        help="auto | bm25 | knn | client-rrf | client-linear | native-rrf | opensearch-hybrid"
    ),
]
Rerank = Annotated[
    bool | None,
    typer.Option("--rerank/--no-rerank", help="cross-encoder rerank (needs ES_RAG_RERANK_MODEL)"),
]


@app.command()
def search(
    query: Annotated[str, typer.Argument(help="the question")],
    tenant: Annotated[str, typer.Option(help="the caller's tenant")],
    as_: CallerAs = None,
    group: Groups = None,
    role: Roles = None,
    k: Annotated[int | None, typer.Option(help="number of hits")] = None,
    strategy: Strategy = None,
    filter_: Filters = None,
    rerank: Rerank = None,
    explain: Annotated[
        bool, typer.Option("--explain", help="table of ranks, RRF shares and rerank scores")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """Hybrid search on behalf of a caller; only what the caller may read comes back."""
    from es_rag.acl import make_caller
    from es_rag.query.search import Searcher

    settings = _settings()
    caller = _run(
        lambda: make_caller(
            tenant,
            users=as_ or [],
            groups=group or [],
            roles=role or [],
            case_sensitive=settings.principal_case_sensitive,
        )
    )
    searcher = Searcher(settings)
    response = _run(
        lambda: searcher.search(
            query, caller=caller, k=k, strategy=strategy, filters=filter_ or [], rerank=rerank
        )
    )
    if as_json:
        typer.echo(json.dumps(response.to_dict(), ensure_ascii=False))
        return
    typer.echo(f"strategy: {response.strategy}" + (f"  ({response.note})" if response.note else ""))
    if response.reranked is False:
        typer.echo(f"not reranked: {response.rerank_note}")
    if explain:
        typer.echo(_explain_table(response.hits))
    for n, hit in enumerate(response.hits, start=1):
        path = " > ".join(hit.title_path)
        ranks = ", ".join(f"{k}={v}" for k, v in hit.ranks.items() if v is not None)
        typer.echo(f"\n[{n}] {path}  ({hit.doc_id}; score {hit.score:.4f}; {ranks})")
        typer.echo(f"    source: {hit.source_uri or hit.doc_id}")
        snippet = " … ".join(hit.highlights) if hit.highlights else hit.text
        typer.echo("    " + " ".join(snippet.split())[:300])
    timings = ", ".join(f"{k} {v:.1f} ms" for k, v in response.timings_ms.items())
    typer.echo(f"\n{len(response.hits)} hits; {timings}")


def _explain_table(hits: list[Any]) -> str:
    fusion = "linear" if any("linear" in h.explain for h in hits) else "rrf"
    head = (
        f"{'#':>3}  {'bm25 rank':>9} {'bm25 score':>10} {'bm25 ' + fusion:>11}  {'knn rank':>8} "
        f"{'knn score':>9} {'knn ' + fusion:>10}  {'fused':>8} {'rerank':>8}  doc"
    )
    lines = [head, "-" * len(head)]

    def fmt(value: Any, width: int, digits: int = 4) -> str:
        if value is None:
            return f"{'-':>{width}}"
        if isinstance(value, float):
            return f"{value:>{width}.{digits}f}"
        return f"{value:>{width}}"

    for n, hit in enumerate(hits, start=1):
        ex = hit.explain
        b, kn = ex.get("bm25") or {}, ex.get("knn") or {}
        lines.append(
            f"{n:>3}  {fmt(b.get('rank'), 9)} {fmt(b.get('score'), 10)} {fmt(b.get(fusion), 11)}  "
            f"{fmt(kn.get('rank'), 8)} {fmt(kn.get('score'), 9)} {fmt(kn.get(fusion), 10)}  "
            f"{fmt(ex.get(fusion), 8)} {fmt(ex.get('rerank'), 8)}  {hit.doc_id}"
        )
    return "\n".join(lines)


@app.command()
def context(
    question: Annotated[str, typer.Argument(help="the question")],
    tenant: Annotated[str, typer.Option(help="the caller's tenant")],
    as_: CallerAs = None,
    group: Groups = None,
    role: Roles = None,
    strategy: Strategy = None,
    filter_: Filters = None,
    rerank: Rerank = None,
    expand: Annotated[
        str | None, typer.Option(help="parent | neighbours | none (default: settings)")
    ] = None,
    budget: Annotated[int | None, typer.Option(help="evidence token budget")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """Prompt-ready evidence with numbered citations, or "no sufficient evidence"."""
    from es_rag.acl import make_caller
    from es_rag.query.context import ContextBuilder
    from es_rag.query.search import Searcher

    if expand not in (None, "parent", "neighbours", "none"):
        _fail(f"--expand must be parent, neighbours or none, not {expand!r}")
    settings = _settings()
    caller = _run(
        lambda: make_caller(
            tenant,
            users=as_ or [],
            groups=group or [],
            roles=role or [],
            case_sensitive=settings.principal_case_sensitive,
        )
    )
    builder = ContextBuilder(Searcher(settings))
    result = _run(
        lambda: builder.build(
            question,
            caller=caller,
            strategy=strategy,
            filters=filter_ or [],
            rerank=rerank,
            expand=expand,  # type: ignore[arg-type]  # checked above
            budget_tokens=budget,
        )
    )
    if as_json:
        typer.echo(json.dumps(result.to_dict(), ensure_ascii=False))
        return
    typer.echo(result.prompt)
    verdict = "sufficient" if result.sufficient else "NOT sufficient"
    typer.echo(f"evidence: {verdict} ({result.reason})", err=True)


@app.command("eval")
def eval_(
    dataset_dir: Annotated[Path, typer.Argument(help="dataset folder (or SQuAD JSON file)")],
    fmt: Annotated[str, typer.Option("--format", help="beir | squad | cranfield | jsonl")],
    strategies: Annotated[
        str, typer.Option(help="comma list: bm25,knn,hybrid,client-rrf,native-rrf,... [+rerank]")
    ] = "bm25,knn,hybrid",
    k: Annotated[int, typer.Option(help="cut-off for nDCG, Recall, MRR, Hit")] = 10,
    output: Annotated[Path, typer.Option(help="results JSON (chart: same name, .png)")] = Path(
        "results.json"
    ),
    index: Annotated[
        str | None,
        typer.Option(
            help="evaluate in this alias instead of a fresh index; the evaluation documents "
            "(tenant es-rag-eval) are removed from it afterwards unless --keep-index"
        ),
    ] = None,
    keep_index: Annotated[
        bool, typer.Option(help="keep the evaluation index (or, with --index, its documents)")
    ] = False,
    split: Annotated[str, typer.Option(help="qrels split (beir) or file hint (squad)")] = "test",
    rank_constant: Annotated[str | None, typer.Option(help="sweep, e.g. 10,20,60")] = None,
    window: Annotated[str | None, typer.Option(help="sweep of rank windows, e.g. 50,100")] = None,
    weights: Annotated[str | None, typer.Option(help="sweep BM25:kNN, e.g. 1:1,2:1")] = None,
    limit_queries: Annotated[int | None, typer.Option(help="first N queries only")] = None,
    runs: Annotated[
        Path | None,
        typer.Option(help="write each strategy's ranking here as a TREC run (<strategy>.run)"),
    ] = None,
) -> None:
    """Measure retrieval quality and latency of strategies side by side on a dataset."""
    from tqdm import tqdm

    from es_rag import datasets
    from es_rag import eval_runner as er
    from es_rag.parts import Parts
    from es_rag.pipeline import Ingestor

    data = _run(lambda: datasets.load(dataset_dir, fmt, split=split))
    if limit_queries:
        data.queries = dict(list(data.queries.items())[:limit_queries])

    def ints(text: str | None) -> list[int]:
        return [int(x) for x in text.split(",") if x.strip()] if text else []

    try:
        sweep_weights = er.parse_weights(weights) if weights else []
        variants = er.parse_strategies(
            strategies,
            rank_constants=ints(rank_constant),
            windows=ints(window),
            weights=sweep_weights,
        )
    except (ValueError, EsRagErrorType) as exc:
        _fail(str(exc))
    base = _settings()
    alias = index or er.eval_index_name(base, data)
    settings = base.model_copy(update={"index": alias})
    parts = Parts(settings)
    ingestor = Ingestor(
        settings, client=parts.engine, embedder=parts.embedder, analyzer=parts.analyzer
    )
    quiet = not sys.stderr.isatty()
    existed = _run(ingestor.index.exists)
    try:
        with tqdm(
            total=len(data.corpus), unit="doc", desc="ingest", disable=quiet, file=sys.stderr
        ) as bar:
            ingest = _run(lambda: er.ingest_dataset(ingestor, data, progress=bar.update))
        with tqdm(
            total=len(data.queries) * len(variants),
            unit="q",
            desc="queries",
            disable=quiet,
            file=sys.stderr,
        ) as bar:
            results, rankings = _run(
                lambda: er.run(settings, data, variants, k=k, parts=parts, progress=bar.update)
            )
    finally:
        # Evaluation documents never stay in an index unless asked to: a fresh index (or
        # one this run created) goes entirely; in an existing alias, only the evaluation
        # tenant's rows go, even after a failure or Ctrl-C.
        if not keep_index:
            if index is None or not existed:
                for name in ingestor.index.concrete_indices():
                    parts.engine.delete_index(name)
            else:
                ingestor.delete_tenant_rows(er.EVAL_TENANT)
    output.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    if runs is not None:
        from es_rag.evaluation import format_trec_run

        runs.mkdir(parents=True, exist_ok=True)
        for name, ranking in rankings.items():
            safe = re.sub(r"[^A-Za-z0-9.+=-]+", "_", name).strip("_")
            (runs / f"{safe}.run").write_text(format_trec_run(ranking, tag=f"es-rag:{name}"))
    meta = {
        "dataset": {
            "path": str(dataset_dir),
            "format": fmt,
            "name": data.name,
            "documents": len(data.corpus),
            "queries": len(data.queries),
        },
        "index": alias,
        "kept": keep_index,
        "ingest": ingest,
        "embedding_model": settings.embedding_model,
        "k": k,
        "settings": {
            key: getattr(settings, key)
            for key in (
                "rank_constant",
                "rank_window_size",
                "num_candidates",
                "bm25_weight",
                "knn_weight",
                "chunk_size",
                "chunk_overlap",
                "analyzer_language",
            )
        },
    }
    output.with_suffix(".meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    try:
        er.chart(results, output.with_suffix(".png"), k=k, title=f"{data.name} ({fmt})")
    except ImportError:
        typer.echo("chart skipped: matplotlib is not installed", err=True)
    typer.echo(er.markdown_table(results, k=k))


@app.command()
def delete(
    doc_id: Annotated[str, typer.Argument(help="the document id to delete")],
    tenant: Annotated[
        str | None,
        typer.Option(help="the document's tenant; required when several tenants hold this id"),
    ] = None,
) -> None:
    """Delete every chunk of one tenant's document."""
    from es_rag.acl import normalize_tenant
    from es_rag.pipeline import Ingestor

    settings = _settings()
    ingestor = Ingestor(settings)
    if tenant is None:
        holders = sorted(_run(lambda: ingestor.index.tenants_of(doc_id)))
        if len(holders) > 1:
            _fail(
                f"{doc_id!r} is held by {len(holders)} tenants ({', '.join(holders)}); "
                "say which with --tenant"
            )
        if not holders:
            typer.echo(json.dumps({"doc_id": doc_id, "tenant": None, "deleted": 0}))
            return
        tenant = holders[0]
    else:
        tenant = _run(
            lambda: normalize_tenant(tenant, case_sensitive=settings.principal_case_sensitive)
        )
    removed = _run(lambda: ingestor.delete_document(doc_id, tenant=tenant))
    typer.echo(json.dumps({"doc_id": doc_id, "tenant": tenant, "deleted": removed}))


@app.command("upgrade-index")
def upgrade_index() -> None:
    """Rewrite an index written by an older es-rag to the current contract, in place.

    Tenant-scoped chunk ids, principals and tenants in their normal form, three-part
    document hashes, status rows keyed by tenant. No re-parsing, no re-embedding;
    re-runnable after a crash. Stop ingestion while it runs.
    """
    from es_rag.pipeline import Ingestor
    from es_rag.upgrade import upgrade_index as run_upgrade

    ingestor = Ingestor(_settings())
    reports = _run(lambda: run_upgrade(ingestor))
    typer.echo(json.dumps({"indexes": [r.to_dict() for r in reports]}, ensure_ascii=False))


@app.command()
def info() -> None:
    """What the cluster offers (version, license, native RRF) and the index's contract."""
    from es_rag.engine.client import make_engine
    from es_rag.engine.index import ChunkIndex

    settings = _settings()
    engine = _run(lambda: make_engine(settings))
    cluster = _run(lambda: engine.probe(settings.index))
    contract = _run(lambda: ChunkIndex(engine, settings.index).contract())
    typer.echo(
        json.dumps(
            {
                "cluster": asdict(cluster),
                "index": settings.index,
                "contract": asdict(contract) if contract else None,
            }
        )
    )


def main() -> None:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    app()


if __name__ == "__main__":
    main()
