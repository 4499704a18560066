"""Commands that ask on behalf of a caller: search and context."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from es_rag.cli import render
from es_rag.cli.common import (
    AsJson,
    CallerAs,
    Filters,
    Groups,
    Rerank,
    Roles,
    Strategy,
    Tenant,
    caller_of,
    fail,
    run,
    settings_of,
)


def search(
    ctx: typer.Context,
    query: Annotated[str, typer.Argument(help="the question")],
    tenant: Tenant,
    as_: CallerAs = None,
    group: Groups = None,
    role: Roles = None,
    k: Annotated[int | None, typer.Option(help="number of hits")] = None,
    strategy: Strategy = None,
    filter_: Filters = None,
    rerank: Rerank = None,
    explain: Annotated[
        bool, typer.Option("--explain", help="table of ranks, fusion shares and rerank scores")
    ] = False,
    as_json: AsJson = False,
) -> None:
    """Hybrid search on behalf of a caller; only what the caller may read comes back."""
    from es_rag.query.search import Searcher

    settings = settings_of(ctx)
    caller = caller_of(settings, tenant, as_, group, role)
    searcher = Searcher(settings)
    response = run(
        lambda: searcher.search(
            query, caller=caller, k=k, strategy=strategy, filters=filter_ or [], rerank=rerank
        )
    )
    if as_json:
        typer.echo(json.dumps(response.to_dict(), ensure_ascii=False))
    else:
        typer.echo(render.search_text(response, explain=explain))


def context(
    ctx: typer.Context,
    question: Annotated[str, typer.Argument(help="the question")],
    tenant: Tenant,
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
    as_json: AsJson = False,
) -> None:
    """Prompt-ready evidence with numbered citations, or "no sufficient evidence"."""
    from es_rag.query.context import ContextBuilder
    from es_rag.query.search import Searcher

    if expand not in (None, "parent", "neighbours", "none"):
        fail(f"--expand must be parent, neighbours or none, not {expand!r}")
    settings = settings_of(ctx)
    caller = caller_of(settings, tenant, as_, group, role)
    builder = ContextBuilder(Searcher(settings))
    result = run(
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


def calibrate(
    ctx: typer.Context,
    force: Annotated[
        bool, typer.Option("--force", help="measure again even if the stored one is current")
    ] = False,
) -> None:
    """The index's weak-evidence calibration: measured on its own chunks, kept in its _meta.

    `context` measures it on first use and again when the model or the retrieval recipe
    (strategy, fusion, candidates) changes or the index doubles or halves; this command
    shows it, or measures it now with --force.
    """
    from es_rag.query import sufficiency
    from es_rag.query.search import Searcher

    settings = settings_of(ctx)
    searcher = Searcher(settings)
    calibration = run(lambda: sufficiency.current(searcher, force=force))
    strictness = settings.sufficiency_strictness
    out = {
        "index": searcher.generation().index,
        **calibration.to_meta(),
        "strictness": strictness,
        "knn_threshold": calibration.knn_threshold(strictness),
        "min_coverage": settings.sufficiency_min_coverage,
    }
    typer.echo(json.dumps(out, ensure_ascii=False))
