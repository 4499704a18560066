"""``es-rag migrate``: a new model, vector type or analyzer without downtime (es_rag.migrate)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from es_rag.cli.common import fail, run, settings_of


def migrate(
    ctx: typer.Context,
    embedding_model: Annotated[
        str | None, typer.Option("--embedding-model", help="the new model (name or path)")
    ] = None,
    embedding_backend: Annotated[
        str | None,
        typer.Option("--embedding-backend", help="sentence-transformers | flag | openai"),
    ] = None,
    embedding_url: Annotated[
        str | None, typer.Option("--embedding-url", help="the new OpenAI-compatible server")
    ] = None,
    embedding_runtime: Annotated[
        str | None,
        typer.Option(
            "--embedding-runtime", help="torch | onnx | onnx-int8 (sentence-transformers only)"
        ),
    ] = None,
    query_prefix: Annotated[
        str | None, typer.Option(help="the new model's query prefix (e.g. 'query: ')")
    ] = None,
    passage_prefix: Annotated[
        str | None, typer.Option(help="the new model's passage prefix (e.g. 'passage: ')")
    ] = None,
    vector_index_type: Annotated[
        str | None, typer.Option("--vector-index-type", help="hnsw, int8_hnsw, flat, ...")
    ] = None,
    analyzer_language: Annotated[
        str | None, typer.Option(help="the new analyzer's language (terms are remade)")
    ] = None,
    gate: Annotated[
        Path | None,
        typer.Option(help="judged dataset: swap only if the new generation ranks it as well"),
    ] = None,
    fmt: Annotated[str, typer.Option("--format", help="beir | squad | cranfield | jsonl")] = "beir",
    split: Annotated[str, typer.Option(help="qrels split of the gate dataset")] = "test",
    min_ratio: Annotated[
        float, typer.Option(help="the new nDCG@10 must be at least this times the old")
    ] = 0.98,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="do not ask before changing")] = False,
    rollback: Annotated[
        bool, typer.Option("--rollback", help="serve the mirrored generation again")
    ] = False,
    drop_old: Annotated[
        bool, typer.Option("--drop-old", help="stop mirroring and delete the old generation")
    ] = False,
    abort: Annotated[
        bool, typer.Option("--abort", help="abandon an unfinished migration (deletes its index)")
    ] = False,
    page_docs: Annotated[int, typer.Option(help="documents copied per page")] = 64,
    progress: Annotated[bool, typer.Option(help="show a progress bar")] = True,
) -> None:
    """Move the alias to a new index generation built with new settings.

    Creates <alias>-<n+1>, mirrors every write into it, re-embeds the stored chunks (no
    re-parsing), verifies every document, optionally gates on retrieval quality, then swaps
    the alias in one request. Re-run after a crash or Ctrl-C to resume. The old generation
    stays mirrored until --drop-old; --rollback swaps back.
    """
    from es_rag.engine.client import make_engine
    from es_rag.migrate import Migrator, dataset_gate

    settings = settings_of(ctx)
    engine = run(lambda: make_engine(settings))
    actions = [
        name
        for name, on in (("rollback", rollback), ("drop-old", drop_old), ("abort", abort))
        if on
    ]
    if len(actions) > 1:
        fail(f"choose one of --{' / --'.join(actions)}")
    migrator = Migrator(engine, settings, page_docs=page_docs)
    if actions:
        action = actions[0]
        if not yes and not typer.confirm(
            f"{action} the migration of {settings.index!r}?", err=True
        ):
            fail("not changed (declined)")
        fn = {"rollback": migrator.rollback, "drop-old": migrator.drop_old, "abort": migrator.abort}
        typer.echo(json.dumps(run(fn[action])))
        return

    overrides: dict[str, Any] = {
        k: v
        for k, v in {
            "embedding_model": embedding_model,
            "embedding_backend": embedding_backend,
            "embedding_url": embedding_url,
            "embedding_runtime": embedding_runtime,
            "query_prefix": query_prefix,
            "passage_prefix": passage_prefix,
            "vector_index_type": vector_index_type,
            "analyzer_language": analyzer_language,
        }.items()
        if v is not None
    }
    if embedding_backend not in (None, "sentence-transformers") and embedding_runtime is None:
        overrides["embedding_runtime"] = "torch"  # ONNX Runtime serves sentence-transformers only
    checker = None
    if gate is not None:
        from es_rag import datasets

        data = run(lambda: datasets.load(gate, fmt, split=split))
        checker = dataset_gate(migrator, data, min_ratio=min_ratio)

    def confirm(question: str) -> bool:
        return yes or typer.confirm(question, err=True)

    bar = None
    if progress and sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(unit="chunk", file=sys.stderr, desc="backfill")
        migrator.progress = bar.update

        def total(rows: int, done: int) -> None:
            assert bar is not None
            bar.reset(total=rows)
            bar.update(done)

        migrator.on_total = total
    try:
        report = run(lambda: migrator.run(overrides, gate=checker, confirm=confirm))
    except KeyboardInterrupt:
        fail("interrupted: run the same command again to resume", code=130)
    finally:
        if bar is not None:
            bar.close()
    typer.echo(json.dumps(report.to_dict(), ensure_ascii=False))
    if not report.swapped:
        raise typer.Exit(1)
