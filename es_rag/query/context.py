"""From hits to prompt-ready evidence: expansion, de-duplication, budget, citations.

Parent expansion replaces a child hit by its section; neighbour expansion adds the child's
siblings (ordinal ± n). Both fetch through ``Searcher.fetch_rows``, under the same ACL as
the search. Hits that expand to the same text are merged (the best score wins), a
document contributes at most ``max_per_doc`` items (diversity), and items are added
strongest first until the token budget is spent.

Weak evidence: the result says ``sufficient: false`` with the signals, so an application
can refuse instead of answering from noise. By default the judge is es_rag.query.sufficiency
(lexical coverage, and the best dense similarity against the index's own calibration);
a fixed ``min_knn_score`` or, when reranked, ``min_rerank_score`` replaces it. Fused
scores depend on ranks or per-query normalisation and say nothing about absolute
relevance, which is why they are not used for this.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from es_rag.chunking import estimate_tokens
from es_rag.config import Settings
from es_rag.query import sufficiency
from es_rag.query.filters import FieldFilter
from es_rag.query.search import Searcher
from es_rag.types import Caller, Hit, SearchResponse

log = logging.getLogger(__name__)

Expansion = Literal["parent", "neighbours", "none"]

PROMPT_RULES = (
    "Answer the question using only the numbered sources below.\n"
    "Cite every source you use by its number in square brackets, like [1].\n"
    "If the sources do not contain the answer, say that you cannot find it in the provided "
    "documents; do not use outside knowledge."
)


@dataclass
class Evidence:
    n: int
    doc_id: str
    source_uri: str | None
    title_path: list[str]
    pages: str | None
    text: str
    score: float
    chunk_ids: list[str] = field(default_factory=list)


@dataclass
class ContextResult:
    sufficient: bool
    evidence: list[Evidence]
    prompt: str
    reason: str
    strategy: str
    reranked: bool | None = None
    signals: dict[str, float | None] = field(default_factory=dict)
    timings_ms: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def pages_label(start: int | None, end: int | None) -> str | None:
    if start is None:
        return None
    return str(start) if end in (None, start) else f"{start}-{end}"


def token_counter(settings: Settings) -> Callable[[str], int]:
    """Count with ``context_tokenizer``, else the local embedding model's tokenizer.

    A remote embedder (``openai`` backend) has no local tokenizer; then, or when the
    tokenizer cannot be loaded (no hub access), the word-based estimate is used.
    """
    name = settings.context_tokenizer
    if name is None and settings.embedding_backend != "openai":
        name = settings.embedding_model
    if not name:
        return estimate_tokens
    try:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(name)
    except Exception as exc:  # any failure: fall back to the estimate, say so once
        log.warning("context budget: cannot load tokenizer %r (%s); estimating tokens", name, exc)
        return estimate_tokens

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False))

    return count


def build_prompt(question: str, evidence: Sequence[Evidence]) -> str:
    parts = [PROMPT_RULES, "", f"Question: {question}", "", "Sources:"]
    for item in evidence:
        where = " > ".join(item.title_path) or item.doc_id
        cite = item.doc_id + (f", p. {item.pages}" if item.pages else "")
        parts += [f"[{item.n}] {where} ({cite})", item.text.strip(), ""]
    if not evidence:
        parts.append("(no sources)")
    return "\n".join(parts).rstrip() + "\n"


class ContextBuilder:
    """Turns a question into evidence and a prompt for one caller."""

    def __init__(
        self, searcher: Searcher, *, count_tokens: Callable[[str], int] | None = None
    ) -> None:
        self.searcher = searcher
        self.settings = searcher.settings
        self._count_tokens = count_tokens

    @property
    def count_tokens(self) -> Callable[[str], int]:
        if self._count_tokens is None:
            self._count_tokens = token_counter(self.settings)
        return self._count_tokens

    def build(
        self,
        question: str,
        *,
        caller: Caller,
        k: int | None = None,
        filters: Sequence[FieldFilter | str] = (),
        strategy: str | None = None,
        rerank: bool | None = None,
        expand: Expansion | None = None,
        neighbours: int | None = None,
        budget_tokens: int | None = None,
        max_per_doc: int | None = None,
    ) -> ContextResult:
        s = self.settings
        expand = expand or s.context_expand
        neighbours = s.context_neighbours if neighbours is None else neighbours
        budget = budget_tokens or s.context_budget_tokens
        per_doc = max_per_doc or s.context_max_per_doc
        response = self.searcher.search(
            question,
            caller=caller,
            k=k or s.context_candidates,
            filters=filters,
            strategy=strategy,
            rerank=rerank,
        )
        sufficient, reason, signals = self.judge(question, response, caller)
        items = self._expand(response.hits, caller, expand, neighbours)
        evidence = self._select(items, per_doc=per_doc, budget=budget) if sufficient else []
        if sufficient and not evidence:
            sufficient, reason = False, "no evidence fits the token budget"
        return ContextResult(
            sufficient=sufficient,
            evidence=evidence,
            prompt=build_prompt(question, evidence),
            reason=reason,
            strategy=response.strategy,
            reranked=response.reranked,
            signals=signals,
            timings_ms=response.timings_ms,
        )

    # --- weak evidence -------------------------------------------------------------------
    def judge(
        self, question: str, response: SearchResponse, caller: Caller
    ) -> tuple[bool, str, dict[str, float | None]]:
        s = self.settings
        if not response.hits:
            return False, "no readable document matches the question", {}
        knn_scores = [v for h in response.hits if (v := h.scores.get("knn")) is not None]
        best_knn = max(knn_scores, default=0.0)
        best_rerank = (
            max((h.scores.get("rerank") or float("-inf") for h in response.hits), default=None)
            if response.reranked
            else None
        )
        signals = {"best_knn_score": best_knn or None, "best_rerank_score": best_rerank}
        if best_rerank is not None and s.min_rerank_score is not None:
            if best_rerank < s.min_rerank_score:
                return (
                    False,
                    (f"best rerank score {best_rerank:.3f} is below {s.min_rerank_score:g}"),
                    signals,
                )
            return True, f"best rerank score {best_rerank:.3f} >= {s.min_rerank_score:g}", signals
        if s.min_knn_score is not None and not knn_scores:
            return True, "no dense similarity in these hits; the threshold was not applied", signals
        if s.min_knn_score is not None:
            if best_knn < s.min_knn_score:
                return (
                    False,
                    (f"best dense similarity {best_knn:.3f} is below {s.min_knn_score:g}"),
                    signals,
                )
            return True, f"best dense similarity {best_knn:.3f} >= {s.min_knn_score:g}", signals
        if s.sufficiency == "off":
            return True, "no evidence threshold applies (sufficiency off)", signals
        found = sufficiency.signals(self.searcher, question, response, caller)
        verdict = sufficiency.decide(
            found,
            sufficiency.current(self.searcher) if knn_scores else None,
            strictness=s.sufficiency_strictness,
            min_coverage=s.sufficiency_min_coverage,
        )
        signals.update(coverage=found.get("coverage"), knn_threshold=verdict.knn_threshold)
        return verdict.sufficient, verdict.reason, signals

    # --- expansion and selection ---------------------------------------------------------
    def _expand(
        self, hits: list[Hit], caller: Caller, expand: Expansion, neighbours: int
    ) -> list[Evidence]:
        if expand == "parent":
            parent_ids = sorted({h.parent_id for h in hits if h.parent_id})
            parents = {r["_id"]: r for r in self.searcher.fetch_rows(caller, ids=parent_ids)}
            items = []
            for h in hits:
                row = parents.get(h.parent_id or "")
                if row is None:  # no parent (or not readable): the child stands alone
                    items.append(_from_hit(h))
                else:
                    items.append(_from_row(row, score=h.score, chunk_ids=[h.chunk_id]))
            return items
        if expand == "neighbours" and neighbours > 0:
            wanted = [
                (h.doc_id, h.doc_version, max(0, h.ordinal - neighbours), h.ordinal + neighbours)
                for h in hits
                if h.doc_version is not None and h.ordinal is not None
            ]
            rows = self.searcher.fetch_rows(caller, neighbours=wanted)
            by_doc: dict[tuple[str, str], dict[int, dict[str, Any]]] = {}
            for row in rows:
                by_doc.setdefault((row["doc_id"], row["doc_version"]), {})[row["ordinal"]] = row
            items = []
            for h in hits:
                siblings = by_doc.get((h.doc_id, h.doc_version or ""), {})
                window = [
                    siblings[o]
                    for o in range((h.ordinal or 0) - neighbours, (h.ordinal or 0) + neighbours + 1)
                    if o in siblings
                ]
                if not window:
                    items.append(_from_hit(h))
                    continue
                text = _merge_overlapping([r["content"] for r in window])
                first, last = window[0], window[-1]
                items.append(
                    Evidence(
                        n=0,
                        doc_id=h.doc_id,
                        source_uri=h.source_uri,
                        title_path=list(first.get("title_path") or h.title_path),
                        pages=pages_label(first.get("page_start"), last.get("page_end")),
                        text=text,
                        score=h.score,
                        chunk_ids=[r["_id"] for r in window],
                    )
                )
            return items
        return [_from_hit(h) for h in hits]

    def _select(self, items: list[Evidence], *, per_doc: int, budget: int) -> list[Evidence]:
        """Strongest first; merge duplicates and overlaps; cap per document; fit the budget."""
        chosen: list[Evidence] = []
        per: dict[str, int] = {}
        used = 0
        for item in sorted((replace(e) for e in items), key=lambda e: -e.score):
            dup = next((c for c in chosen if _same_or_inside(item, c)), None)
            if dup is not None:
                dup.chunk_ids = sorted(set(dup.chunk_ids) | set(item.chunk_ids))
                continue
            contained = [c for c in chosen if _same_or_inside(c, item)]
            freed = sum(self.count_tokens(c.text) for c in contained)
            cost = self.count_tokens(item.text)
            if per.get(item.doc_id, 0) - len(contained) >= per_doc or used - freed + cost > budget:
                continue  # does not fit; whatever it would have replaced stays
            if contained:
                # The new item covers earlier, stronger ones: it takes the place (and the
                # score) of the first of them, so the order stays strongest first.
                at = chosen.index(contained[0])
                item.score = max([item.score, *(c.score for c in contained)])
                item.chunk_ids = sorted(
                    {*item.chunk_ids, *(i for c in contained for i in c.chunk_ids)}
                )
                for c in contained:
                    chosen.remove(c)
                chosen.insert(at, item)
            else:
                chosen.append(item)
            per[item.doc_id] = per.get(item.doc_id, 0) - len(contained) + 1
            used += cost - freed
        for n, item in enumerate(chosen, start=1):
            item.n = n
        return chosen


def _from_hit(h: Hit) -> Evidence:
    return Evidence(
        n=0,
        doc_id=h.doc_id,
        source_uri=h.source_uri,
        title_path=list(h.title_path),
        pages=pages_label(h.page_start, h.page_end),
        text=h.text,
        score=h.score,
        chunk_ids=[h.chunk_id],
    )


def _from_row(row: dict[str, Any], *, score: float, chunk_ids: list[str]) -> Evidence:
    return Evidence(
        n=0,
        doc_id=row["doc_id"],
        source_uri=row.get("source_uri"),
        title_path=list(row.get("title_path") or []),
        pages=pages_label(row.get("page_start"), row.get("page_end")),
        text=row.get("content", ""),
        score=score,
        chunk_ids=chunk_ids,
    )


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def _same_or_inside(a: Evidence, b: Evidence) -> bool:
    """``a`` adds nothing to ``b``: same document and ``a``'s text is within ``b``'s."""
    return a.doc_id == b.doc_id and _norm(a.text) in _norm(b.text)


def _merge_overlapping(texts: list[str]) -> str:
    """Join consecutive chunks, dropping the overlap each repeats from the previous one."""
    out = texts[0] if texts else ""
    for text in texts[1:]:
        overlap = 0
        for size in range(min(len(out), len(text)), 0, -1):
            if out.endswith(text[:size]):
                overlap = size
                break
        out = out + ("" if overlap else "\n\n") + text[overlap:]
    return out
