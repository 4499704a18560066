"""Text the commands print for people (``--json`` prints the data itself), pure."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from es_rag.types import Hit, IngestResult, SearchResponse

STATUSES = ("queued", "running", "indexed", "skipped", "failed")


def ingest_summary(rows: Sequence[IngestResult | dict[str, Any]]) -> str:
    """One line for an ingest, inline (results) or queued (status rows); a walk's excluded
    files are counted apart from those skipped because they were already indexed."""
    dicts = [r.to_dict() if isinstance(r, IngestResult) else r for r in rows]
    counts = {s: sum(r["status"] == s for r in dicts) for s in ("indexed", "skipped", "failed")}
    chunks = sum(r.get("chunks") or 0 for r in dicts if r["status"] == "indexed")
    excluded = sum(r["status"] == "skipped" and r.get("reason") == "excluded" for r in dicts)
    return (
        f"{counts['indexed']} indexed ({chunks} chunks), {counts['skipped'] - excluded} "
        f"skipped, {excluded} excluded, {counts['failed']} failed"
    )


def search_text(response: SearchResponse, *, explain: bool = False) -> str:
    lines = [f"strategy: {response.strategy}" + (f"  ({response.note})" if response.note else "")]
    if response.reranked is False:
        lines.append(f"not reranked: {response.rerank_note}")
    if explain:
        if response.expansion:
            added = " ".join(f"{e.term}^{e.boost:.2f}" for e in response.expansion)
            lines.append(f"feedback added to BM25: {added}")
        if response.sentences:
            lines.append("kNN also asked: " + " | ".join(response.sentences))
        lines.append(explain_table(response.hits))
    for n, hit in enumerate(response.hits, start=1):
        path = " > ".join(hit.title_path)
        ranks = ", ".join(f"{k}={v}" for k, v in hit.ranks.items() if v is not None)
        lines.append(f"\n[{n}] {path}  ({hit.doc_id}; score {hit.score:.4f}; {ranks})")
        lines.append(f"    source: {hit.source_uri or hit.doc_id}")
        snippet = " … ".join(hit.highlights) if hit.highlights else hit.text
        lines.append("    " + " ".join(snippet.split())[:300])
    timings = ", ".join(f"{k} {v:.1f} ms" for k, v in response.timings_ms.items())
    lines.append(f"\n{len(response.hits)} hits; {timings}")
    return "\n".join(lines)


def explain_table(hits: Sequence[Hit]) -> str:
    """Each hit's rank, raw score and fusion share per retriever, fused and rerank scores."""
    fusion = next((m for m in ("linear", "zscore") if any(m in h.explain for h in hits)), "rrf")
    head = (
        f"{'#':>3}  {'bm25 rank':>9} {'bm25 score':>10} {'bm25 ' + fusion:>11}  {'knn rank':>8} "
        f"{'knn score':>9} {'knn ' + fusion:>10}  {'fused':>8} {'rerank':>8}  doc"
    )
    lines = [head, "-" * len(head)]
    for n, hit in enumerate(hits, start=1):
        ex = hit.explain
        b, kn = ex.get("bm25") or {}, ex.get("knn") or {}
        lines.append(
            f"{n:>3}  {_cell(b.get('rank'), 9)} {_cell(b.get('score'), 10)} "
            f"{_cell(b.get(fusion), 11)}  {_cell(kn.get('rank'), 8)} {_cell(kn.get('score'), 9)} "
            f"{_cell(kn.get(fusion), 10)}  {_cell(ex.get(fusion), 8)} {_cell(ex.get('rerank'), 8)}"
            f"  {hit.doc_id}"
        )
    return "\n".join(lines)


def _cell(value: Any, width: int, digits: int = 4) -> str:
    if value is None:
        return f"{'-':>{width}}"
    if isinstance(value, float):
        return f"{value:>{width}.{digits}f}"
    return f"{value:>{width}}"


def status_text(report: dict[str, Any], *, queues: Sequence[str], lease_s: int) -> str:
    counts = report["counts"]
    lines = [f"queue depth: {report['queue_depth']} ({', '.join(queues)}); "
             f"live workers: {report['workers']}"]  # fmt: skip
    lines += [f"{name:>8}: {counts.get(name, 0)}" for name in STATUSES]
    orphaned, awaiting = report["orphaned"], report["awaiting_redelivery"]
    if orphaned or awaiting:
        lines.append(
            f"orphaned: {len(orphaned)} running on a dead worker, {awaiting} message(s) of dead "
            f"workers; a live worker hands them back within {lease_s} s"
        )
    lines += [f"ORPHANED {r['tenant']}/{r['doc_id']} (worker {r['worker']})" for r in orphaned]
    lines += [
        f"FAILED {r['tenant']}/{r['doc_id']} (attempts {r['attempts']}): {r['error']}"
        for r in report["failed"]
    ]
    return "\n".join(lines)
