"""The service and its credentials: ``es-rag serve`` and ``es-rag keys``."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Annotated

import typer

from es_rag.cli.common import fail, run, settings_of

if TYPE_CHECKING:
    from es_rag.serve.keys import KeyStore

keys_app = typer.Typer(
    no_args_is_help=True, help="API keys for `es-rag serve` (stored hashed, shown once)."
)


def serve(
    ctx: typer.Context,
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to listen on")] = 8080,
    workers: Annotated[int, typer.Option(help="processes, each with its own model")] = 1,
    log_level: Annotated[str, typer.Option(help="uvicorn's log level")] = "info",
) -> None:
    """Serve the JSON API (v1) over HTTP; callers are known by API key or JWT.

    Each process loads the model once, warms it, and only then accepts requests; SIGTERM
    lets the requests in flight finish. Access logs are JSON lines on stderr.
    """
    import uvicorn

    settings = settings_of(ctx)
    if workers < 1:
        fail("--workers must be >= 1")
    # The processes uvicorn starts read their settings from the environment: the global
    # flags travel there.
    for name, value in (ctx.obj or {}).items():
        if value is not None:
            os.environ[f"ES_RAG_{name.upper()}"] = str(value)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    uvicorn.run(
        "es_rag.serve.app:create_app",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level=log_level,
        access_log=False,  # es-rag writes its own, without question text
        timeout_graceful_shutdown=int(settings.serve_request_timeout) + 5,
    )


def _store(ctx: typer.Context) -> KeyStore:
    from es_rag.engine.client import make_engine
    from es_rag.serve.keys import KeyStore

    settings = settings_of(ctx)
    engine = run(lambda: make_engine(settings))
    return KeyStore(
        engine,
        settings.keys_index,
        cache_seconds=0,
        case_sensitive=settings.principal_case_sensitive,
    )


@keys_app.command("create")
def create(
    ctx: typer.Context,
    tenant: Annotated[str, typer.Option(help="the tenant every call with this key acts in")],
    principal: Annotated[
        list[str] | None,
        typer.Option("--principal", help="user:u1, group:g, role:r (repeat)"),
    ] = None,
    role: Annotated[str, typer.Option(help="search | ingest | admin")] = "search",
    alias: Annotated[
        list[str] | None, typer.Option("--alias", help="aliases it may use (default: any)")
    ] = None,
    expires: Annotated[str | None, typer.Option(help="lifetime: 30d, 12h, 15m")] = None,
    rate_limit: Annotated[
        float | None, typer.Option(help="requests per second (default: the service's)")
    ] = None,
    name: Annotated[str, typer.Option(help="a label for people")] = "",
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Create a key and print it once (it is stored only as a hash)."""
    from es_rag.serve.keys import parse_duration

    store = _store(ctx)
    lifetime = run(lambda: parse_duration(expires)) if expires else None
    made = run(
        lambda: store.create(
            tenant=tenant,
            principals=principal or [],
            role=role,
            aliases=alias,
            name=name,
            expires_in=lifetime,
            rate_limit=rate_limit,
        )
    )
    if as_json:
        out = {"id": made.key.key_id, "api_key": made.secret, "encoded": made.encoded}
        typer.echo(json.dumps({**out, "key": made.key.to_public()}, ensure_ascii=False))
        return
    typer.echo(f"id:       {made.key.key_id}")
    typer.echo(f"api_key:  {made.secret}")
    typer.echo(f"encoded:  {made.encoded}")
    typer.echo(f"use it:   Authorization: ApiKey {made.encoded}")
    typer.echo("the key is not stored and cannot be shown again", err=True)


@keys_app.command("list")
def list_(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Every key with what it stands for (never its secret)."""
    keys = run(_store(ctx).list)
    if as_json:
        typer.echo(json.dumps([k.to_public() for k in keys], ensure_ascii=False))
        return
    for k in keys:
        state = "revoked" if k.revoked_at else (f"expires {k.expires_at}" if k.expires_at else "")
        principals = ",".join(k.principals) or "-"
        typer.echo(f"{k.key_id}  {k.role:<6}  {k.tenant}  {principals}  {k.name}  {state}".rstrip())


@keys_app.command("revoke")
def revoke(
    ctx: typer.Context,
    key_id: Annotated[str, typer.Argument(help="the key's id")],
) -> None:
    """Revoke a key; every serving process refuses it within ES_RAG_KEYS_CACHE_SECONDS."""
    store = _store(ctx)
    if not run(lambda: store.revoke(key_id)):
        fail(f"no key {key_id!r}")
    typer.echo(json.dumps({"id": key_id, "revoked": True}))
