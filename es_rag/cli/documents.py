"""Commands on the index and its documents: init, ingest, delete, info, upgrade-index."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from es_rag.cli import render
from es_rag.cli.common import fail, ingest_streams, math_threads, run, settings_of, tenant_of

if TYPE_CHECKING:
    from es_rag.files import Listed


def init(ctx: typer.Context) -> None:
    """Create the index and its alias (idempotent); refuse an incompatible existing index."""
    from es_rag.pipeline import Ingestor

    ingestor = Ingestor(settings_of(ctx))
    name, created = run(ingestor.init_index)
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


def ingest(
    ctx: typer.Context,
    paths: Annotated[
        list[Path],
        typer.Argument(
            help="files or folders: PDF, DOCX, PPTX, XLSX, ODT, RTF, EPUB, CSV, HTML, Markdown, "
            "text, EML, images (the type is read from the content)"
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
    exclude: Annotated[
        list[str] | None,
        typer.Option(
            help="in folders, leave out what this .gitignore pattern names (*.log, drafts/, "
            "!*.svg to walk SVG files again), repeatable; reported as skipped"
        ),
    ] = None,
    all_files: Annotated[
        bool,
        typer.Option(
            "--all-files",
            help="in folders, offer every file to the parser, even the names that are never "
            "documents (styles, scripts, fonts, icons, archives, search indexes)",
        ),
    ] = False,
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
    from es_rag.files import WalkFilter, expand_paths
    from es_rag.pipeline import Ingestor

    settings = settings_of(ctx)
    walk = run(lambda: WalkFilter.of(settings, exclude or [], defaults=not all_files))
    acl = run(
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
            fail(f"--meta expects KEY=VALUE, got {item!r}")
        metadata[key] = value
    if not queue:
        # Inline, this process embeds the files itself and nothing else: streams, as a worker.
        settings = ingest_streams(settings, math_threads())
    ingestor = Ingestor(settings)
    if queue:
        from es_rag.jobs.payloads import AclPayload  # the queue's imports (Celery) only here

        payload = AclPayload(tenant=tenant, public=public, allow=allow or [], deny=deny or [])
        _ingest_queued(
            ingestor,
            list(expand_paths(paths, walk)),
            payload,
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
        fail("--doc-version needs --queue (inline ingest versions documents by content)")
    total = sum(1 for _ in expand_paths(paths, walk))
    bar = _progress_bar(total, enabled=progress and not as_json and total > 1)

    def on_result(result: Any) -> None:
        if bar is not None:
            bar.update(1)
        if result.status == "failed" and not as_json:
            typer.echo(f"FAILED {result.doc_id}: {result.error}", err=True)

    results = run(
        lambda: ingestor.ingest_paths(
            paths, acl=acl, doc_id=doc_id, metadata=metadata, on_result=on_result, exclude=walk
        )
    )
    if bar is not None:
        bar.close()
    if as_json:
        typer.echo(json.dumps({"results": [r.to_dict() for r in results]}, ensure_ascii=False))
    else:
        typer.echo(render.ingest_summary(results))
    if any(r.status == "failed" for r in results):
        raise typer.Exit(1)


def _progress_bar(total: int, *, enabled: bool) -> Any:
    if not (enabled and sys.stderr.isatty()):
        return None
    from tqdm import tqdm

    return tqdm(total=total, unit="doc", file=sys.stderr)


def _ingest_queued(
    ingestor: Any,
    files: list[Listed],
    acl: Any,
    *,
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
    from es_rag import jobs
    from workers.app import make_app

    if (doc_id or doc_version) and len(files) != 1:
        fail("--doc-id and --doc-version name one document: give exactly one file")
    app = make_app(ingestor.settings)
    keys, not_queued = run(
        lambda: jobs.enqueue_files(
            ingestor, app, files, acl, doc_id=doc_id, doc_version=doc_version, metadata=metadata
        )
    )
    unreadable = [r for r in not_queued if r["status"] == "failed"]
    if not as_json:
        for row in unreadable:
            typer.echo(f"FAILED {row['doc_id']}: {row['error']}", err=True)
    if not wait:
        excluded = [r["doc_id"] for r in not_queued if r["status"] == "skipped"]
        if as_json:
            sent = {"queued": keys, "failed": unreadable, "excluded": excluded}
            typer.echo(json.dumps(sent, ensure_ascii=False))
        else:
            typer.echo(f"{len(keys)} queued, {len(excluded)} excluded, {len(unreadable)} failed")
        if unreadable:
            raise typer.Exit(1)
        return
    bar = _progress_bar(len(keys), enabled=progress and not as_json)

    def on_final(row: dict[str, Any]) -> None:
        if bar is not None:
            bar.update(1)
        if row["status"] == "failed" and not as_json:
            typer.echo(f"FAILED {row['doc_id']}: {row.get('error')}", err=True)

    try:
        done = run(
            lambda: jobs.wait_for(ingestor, keys, tenant=tenant, timeout=timeout, on_final=on_final)
        )
    except TimeoutError as exc:
        fail(str(exc), code=2)
    if bar is not None:
        bar.close()
    rows = [done[k] for k in keys] + not_queued
    if as_json:
        fields = ("doc_id", "status", "reason", "chunks", "error", "attempts")
        out = [{k: r.get(k) for k in fields} for r in rows]
        typer.echo(json.dumps({"results": out}, ensure_ascii=False))
    else:
        typer.echo(render.ingest_summary(rows))
    if any(r["status"] == "failed" for r in rows):
        raise typer.Exit(1)


def delete(
    ctx: typer.Context,
    doc_id: Annotated[str, typer.Argument(help="the document id to delete")],
    tenant: Annotated[
        str | None,
        typer.Option(help="the document's tenant; required when several tenants hold this id"),
    ] = None,
) -> None:
    """Delete every chunk of one tenant's document."""
    from es_rag.pipeline import Ingestor

    settings = settings_of(ctx)
    ingestor = Ingestor(settings)
    owner = tenant_of(settings, tenant)
    if owner is None:
        holders = sorted(run(lambda: ingestor.index.tenants_of(doc_id)))
        if len(holders) > 1:
            fail(
                f"{doc_id!r} is held by {len(holders)} tenants ({', '.join(holders)}); "
                "say which with --tenant"
            )
        if not holders:
            typer.echo(json.dumps({"doc_id": doc_id, "tenant": None, "deleted": 0}))
            return
        owner = holders[0]
    holder: str = owner
    removed = run(lambda: ingestor.delete_document(doc_id, tenant=holder))
    typer.echo(json.dumps({"doc_id": doc_id, "tenant": holder, "deleted": removed}))


def upgrade_index(ctx: typer.Context) -> None:
    """Rewrite an index written by an older es-rag to the current contract, in place.

    Tenant-scoped chunk ids, principals and tenants in their normal form, three-part
    document hashes, status rows keyed by tenant. No re-parsing, no re-embedding;
    re-runnable after a crash. Stop ingestion while it runs.
    """
    from es_rag.pipeline import Ingestor
    from es_rag.upgrade import upgrade_index as run_upgrade

    ingestor = Ingestor(settings_of(ctx))
    reports = run(lambda: run_upgrade(ingestor))
    typer.echo(json.dumps({"indexes": [r.to_dict() for r in reports]}, ensure_ascii=False))


def info(ctx: typer.Context) -> None:
    """What the cluster offers (version, license, native RRF), the index's contract, its
    generations (which one serves, which one is mirrored) and any migration in progress."""
    from es_rag.engine.client import make_engine
    from es_rag.engine.index import ChunkIndex
    from es_rag.migrate import Migrator

    settings = settings_of(ctx)
    engine = run(lambda: make_engine(settings))
    cluster = run(lambda: engine.probe(settings.index))
    contract = run(lambda: ChunkIndex(engine, settings.index).contract())
    generations = run(lambda: Migrator(engine, settings).status())
    typer.echo(
        json.dumps(
            {
                "cluster": asdict(cluster),
                "index": settings.index,
                "contract": asdict(contract) if contract else None,
                "generations": generations,
            }
        )
    )
