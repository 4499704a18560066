"""``es-rag dashboards``: es-rag's saved objects in Kibana or OpenSearch Dashboards.

This module imports nothing heavy (no search client, no model): the compose file's setup
job runs it from an install with only the CLI's own dependencies.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from es_rag.cli.common import fail, run, settings_of, tenant_of

dashboards_app = typer.Typer(
    no_args_is_help=True,
    help="Kibana / OpenSearch Dashboards: data views, saved searches and the ingestion dashboard.",
)

Alias = Annotated[
    str | None, typer.Option(help="the index alias the objects read (default: --index)")
]
Tenant = Annotated[
    str | None,
    typer.Option(help='the tenant of the "documents of a tenant" search (default: every one)'),
]


@dashboards_app.command("install")
def install(
    ctx: typer.Context,
    url: Annotated[
        str,
        typer.Option(
            envvar="ES_RAG_KIBANA_URL",
            help="Kibana or OpenSearch Dashboards, e.g. http://localhost:5601",
        ),
    ],
    engine: Annotated[
        str,
        typer.Option(help="auto (asks the server) | kibana | opensearch-dashboards"),
    ] = "auto",
    space: Annotated[
        str | None,
        typer.Option(help="Kibana space id; on OpenSearch Dashboards, the security tenant"),
    ] = None,
    alias: Alias = None,
    tenant: Tenant = None,
    api_key: Annotated[
        str | None,
        typer.Option(envvar="ES_RAG_KIBANA_API_KEY", help="Kibana API key (encoded form)"),
    ] = None,
    user: Annotated[str | None, typer.Option(envvar="ES_RAG_KIBANA_USER")] = None,
    password: Annotated[str | None, typer.Option(envvar="ES_RAG_KIBANA_PASSWORD")] = None,
    wait: Annotated[
        float, typer.Option(help="seconds to keep trying while the server is starting")
    ] = 0.0,
    timeout: Annotated[float, typer.Option(help="seconds per request")] = 60.0,
) -> None:
    """Import the data views, saved searches, visualizations and dashboard (idempotent).

    Objects are overwritten by id (``es-rag.<name>.<alias>``): running it again updates
    them, and edits made to them in the UI are replaced. Prints one JSON object; exits 1
    if any object was not imported.
    """
    from es_rag.dashboards import install as do_install

    settings = settings_of(ctx)
    summary = run(
        lambda: do_install(
            url,
            alias=alias or settings.index,
            engine=engine,
            tenant=tenant_of(settings, tenant),
            space=space,
            api_key=api_key,
            user=user,
            password=password,
            wait_s=wait,
            timeout_s=timeout,
        )
    )
    typer.echo(json.dumps(summary, ensure_ascii=False))
    if not summary["success"]:
        first = summary["errors"][0] if summary["errors"] else {}
        fail(
            f"{len(summary['errors'])} of {summary['objects']} saved objects not imported "
            f"(first: {first.get('type')} {first.get('id')}: {first.get('error')})"
        )


@dashboards_app.command("render")
def render(
    ctx: typer.Context,
    engine: Annotated[str, typer.Option(help="kibana | opensearch-dashboards")] = "kibana",
    alias: Alias = None,
    tenant: Tenant = None,
) -> None:
    """Print the saved objects as NDJSON, for an import by hand (Saved objects > Import)."""
    from es_rag.dashboards import render as do_render
    from es_rag.dashboards import to_ndjson

    settings = settings_of(ctx)
    objects = run(
        lambda: do_render(engine, alias=alias or settings.index, tenant=tenant_of(settings, tenant))
    )
    typer.echo(to_ndjson(objects).decode("utf-8"), nl=False)
