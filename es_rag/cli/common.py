"""What every command shares: settings from the context, one-line errors, caller flags."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Annotated, Any, NoReturn, TypeVar

import typer

from es_rag.config import Settings
from es_rag.errors import EsRagError
from es_rag.types import Caller

T = TypeVar("T")


def settings_of(ctx: typer.Context, **extra: Any) -> Settings:
    """Settings from ES_RAG_* with the global flags (kept on the context) on top."""
    overrides = dict(ctx.obj or {})
    values = {k: v for k, v in {**overrides, **extra}.items() if v is not None}
    try:
        return Settings(**values)
    except ValueError as exc:
        fail(f"configuration: {exc}")


# Streams an ingesting command sets by itself: each holds a batch's activations (about
# half a GB for a bge-m3-sized model at 16 texts of 512 tokens), so many-core hosts stop here.
MAX_DEFAULT_STREAMS = 8


def math_threads(default: int | None = None) -> int:
    """The process's math threads: ``OMP_NUM_THREADS`` when it is a count, else ``default``
    (the cores when not given)."""
    omp = os.environ.get("OMP_NUM_THREADS", "")
    if omp.isdigit():
        return int(omp)
    return default if default is not None else (os.cpu_count() or 1)


def ingest_streams(settings: Settings, math_threads: int) -> Settings:
    """``settings`` with one embedding stream per math thread, unless the user chose.

    For commands that embed many texts a call and nothing else: one stream per math
    thread outruns one stream with all of them (README, "Ingestion through the queue").
    The embedder gives each stream its share of torch's threads, never fewer than one.
    """
    if "embedding_streams" in settings.model_fields_set:
        return settings
    streams = max(1, min(math_threads, MAX_DEFAULT_STREAMS))
    return settings.model_copy(update={"embedding_streams": streams})


def fail(message: str, code: int = 1) -> NoReturn:
    typer.echo(f"es-rag: error: {' '.join(message.split())}", err=True)
    raise typer.Exit(code)


def run(fn: Callable[[], T]) -> T:
    """Run ``fn``; es-rag's errors (a dead server among them) become one line on stderr."""
    try:
        return fn()
    except EsRagError as exc:
        fail(f"{type(exc).__name__}: {exc}")


def caller_of(
    settings: Settings,
    tenant: str,
    users: list[str] | None,
    groups: list[str] | None,
    roles: list[str] | None,
) -> Caller:
    from es_rag.acl import make_caller

    return run(
        lambda: make_caller(
            tenant,
            users=users or [],
            groups=groups or [],
            roles=roles or [],
            case_sensitive=settings.principal_case_sensitive,
        )
    )


def tenant_of(settings: Settings, tenant: str | None) -> str | None:
    """A ``--tenant`` flag in the one form rows are written in (None stays None)."""
    if tenant is None:
        return None
    from es_rag.acl import normalize_tenant

    return run(lambda: normalize_tenant(tenant, case_sensitive=settings.principal_case_sensitive))


Tenant = Annotated[str, typer.Option(help="the caller's tenant")]
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
        help="auto | bm25 | knn | client-rrf | client-linear | client-zscore | native-rrf"
        " | opensearch-hybrid"
    ),
]
Rerank = Annotated[
    bool | None,
    typer.Option("--rerank/--no-rerank", help="cross-encoder rerank (needs ES_RAG_RERANK_MODEL)"),
]
AsJson = Annotated[bool, typer.Option("--json", help="print one JSON object")]
