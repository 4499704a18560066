"""``es-rag eval``: retrieval quality and latency of strategies side by side."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Annotated

import typer

from es_rag.cli.common import fail, run, settings_of
from es_rag.errors import EsRagError


def eval_(
    ctx: typer.Context,
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
    feedback: Annotated[
        str | None,
        typer.Option(help="sweep of feedback chunks for the fused strategies, e.g. 0,3"),
    ] = None,
    sentences: Annotated[
        str | None,
        typer.Option(help="sweep of the question's sentences also asked on the kNN side, e.g. 0,4"),
    ] = None,
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

    data = run(lambda: datasets.load(dataset_dir, fmt, split=split))
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
            feedbacks=ints(feedback),
            sentences=ints(sentences),
        )
    except (ValueError, EsRagError) as exc:
        fail(str(exc))
    base = settings_of(ctx)
    alias = index or er.eval_index_name(base, data)
    settings = base.model_copy(update={"index": alias})
    parts = Parts(settings)
    ingestor = Ingestor(
        settings, client=parts.engine, embedder=parts.embedder, analyzer=parts.analyzer
    )
    quiet = not sys.stderr.isatty()
    existed = run(ingestor.index.exists)
    try:
        with tqdm(
            total=len(data.corpus), unit="doc", desc="ingest", disable=quiet, file=sys.stderr
        ) as bar:
            ingest = run(lambda: er.ingest_dataset(ingestor, data, progress=bar.update))
        with tqdm(
            total=len(data.queries) * len(variants),
            unit="q",
            desc="queries",
            disable=quiet,
            file=sys.stderr,
        ) as bar:
            results, rankings = run(
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
                removed = ingestor.delete_tenant_rows(er.EVAL_TENANT)
                # Said aloud: an index an earlier `--keep-index` run kept holds nothing but
                # these rows, and is empty after a run that reuses it without the flag.
                typer.echo(
                    f"es-rag: removed the run's {removed} rows from {alias} "
                    "(--keep-index keeps them)",
                    err=True,
                )
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
