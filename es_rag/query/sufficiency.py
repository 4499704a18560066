"""Is there enough evidence to answer? Signals, the index's own calibration, the decision.

A retrieval always returns something; the question is whether it holds the answer. Raw
scores alone do not say: a similarity of 0.78 is strong for one model and noise for
another, and a BM25 score grows with the collection. So the judge combines a signal that
carries its own scale with a calibration the index measures for itself, without labels:

* ``coverage``: the share of the question's content terms, weighted by their rarity among
  the rows the caller may read (BM25's idf), that the best evidence chunk contains. An
  answer names what the question names; a question about nitrogen on Mars asked of a
  shipping handbook finds "liquid" and "point" at best. This is a floor, not a ranking
  signal: on the dev collections a higher bar refused answerable questions as often as
  unanswerable ones.
* ``best_knn``: the best dense similarity (the server's ``_score``), compared with where
  questions this index cannot answer score.

Calibration (:func:`calibrate`) asks the index questions it cannot answer: spans cut from
a seeded sample of its own chunks (several from each chunk of a small index, so that its
percentiles rest on more than a handful of probes), each asked with its source document
filtered out (the situation of a question about a document nobody indexed). The median
and 90th percentile of their best similarities are stored in the index's ``_meta`` with
the model, the corpus size and the retrieval recipe (strategy, fusion, candidates) they
were measured on, so every process judges alike, and a new model, a corpus that doubled
or halved, or another recipe (the best similarity is taken from the hits that recipe
returns) triggers a new calibration. The threshold sits at
``median + strictness × (p90 − median)``; the strictness (default 1.1) was chosen on the
dev collections leaving each out in turn, and was the same on every fold, for both models.
"""

from __future__ import annotations

import logging
import math
import random
import re
import statistics
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from es_rag.acl import acl_filter
from es_rag.errors import EsRagError
from es_rag.query import build
from es_rag.query.hits import LOG_SCORES
from es_rag.query.strategies.base import Request
from es_rag.types import Caller, SearchResponse

if TYPE_CHECKING:
    from es_rag.config import Settings
    from es_rag.query.search import Searcher

log = logging.getLogger(__name__)

MAX_TERMS = 32  # question terms looked up (one count each, in one _msearch)
EVIDENCE_HITS = 5  # how many of the best hits may supply the covering chunk
META_KEY = "sufficiency"  # in the concrete index's mapping _meta
CALIBRATION_VERSION = 2  # 2: several spans per chunk on a small index
PROBES = 64  # unanswerable probes per calibration
SPANS_PER_CHUNK = 4  # on an index of fewer than PROBES chunks, up to this many spans each
MIN_PROBES = 8  # fewer (a tiny index): no dense threshold, the lexical check alone
REGROWTH = 2.0  # recalibrate when the index has grown (or shrunk) by this factor

Signals = dict[str, float | None]

_SENTENCE_RE = re.compile(r"(?<=[.!?。！？；;])\s*|\n+")
_HAN_RE = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")


def idf(df: int, n: int) -> float:
    """BM25's idf (Lucene's form: never negative)."""
    return math.log(1.0 + (n - df + 0.5) / (df + 0.5))


def signals(searcher: Searcher, question: str, response: SearchResponse, caller: Caller) -> Signals:
    """The judge's inputs for one answered search, all under the caller's ACL."""
    hits = response.hits
    knn = [v for h in hits if (v := h.scores.get("knn")) is not None]
    out: Signals = {"best_knn": max(knn) if knn else None}
    analyzer = searcher.generation().analyzer
    terms = list(dict.fromkeys(analyzer.terms(question)))[:MAX_TERMS]
    if not terms or not hits:
        out["coverage"] = 0.0 if terms else None
        return out
    n, df = _frequencies(searcher, caller, terms)
    weights = {t: idf(df.get(t, 0), n) for t in terms}
    total = sum(weights.values()) or 1.0
    coverage = 0.0
    for h in hits[:EVIDENCE_HITS]:
        present = set(analyzer.terms(h.text)) | set(analyzer.terms(" ".join(h.title_path)))
        coverage = max(coverage, sum(w for t, w in weights.items() if t in present) / total)
    out["coverage"] = coverage
    return out


def _frequencies(
    searcher: Searcher, caller: Caller, terms: Sequence[str]
) -> tuple[int, dict[str, int]]:
    """Readable chunks, and how many of them hold each term: counts, under the ACL."""
    acl = acl_filter(caller)
    index = searcher.generation().index
    searches: list[dict[str, Any]] = []
    for term in [None, *terms]:
        clauses = build.retrieval_filters(acl)
        if term is not None:
            clauses = [*clauses, {"term": {"content_terms": term}}]
        searches += [
            {"index": index},
            {"size": 0, "track_total_hits": True, "query": {"bool": {"filter": clauses}}},
        ]
    responses = searcher.send(Request(searches=searches), acl)
    counts = [int(r["hits"]["total"]["value"]) for r in responses]
    return counts[0], dict(zip(terms, counts[1:], strict=True))


# --- calibration ---------------------------------------------------------------------------
@dataclass
class Calibration:
    """Where the index's unanswerable probes score, and what they were measured on."""

    knn_median: float | None  # best dense similarity of the probes: median ...
    knn_p90: float | None  # ... and 90th percentile
    model: str = ""
    rows: int = 0
    recipe: str = ""
    probes: int = 0
    measured_at: float = 0.0
    version: int = CALIBRATION_VERSION
    negatives: list[Signals] = field(default_factory=list, repr=False)

    def knn_threshold(self, strictness: float) -> float | None:
        """``median + strictness × (p90 − median)``: 0 accepts what half the unanswerable
        probes reach, 1 what one in ten reaches; higher refuses more."""
        if self.knn_median is None or self.knn_p90 is None:
            return None
        return self.knn_median + strictness * (self.knn_p90 - self.knn_median)

    def stale(self, *, model: str, rows: int, recipe: str) -> str | None:
        """Why this calibration no longer describes the index, or None."""
        if self.version != CALIBRATION_VERSION:
            return "the calibration method changed"
        if self.model != model:
            return "the embedding model changed"
        if self.recipe != recipe:
            return f"the retrieval recipe changed ({self.recipe or 'unrecorded'} -> {recipe})"
        if rows > REGROWTH * max(self.rows, 1) or rows * REGROWTH < self.rows:
            return f"the index went from {self.rows} to {rows} chunks"
        return None

    def to_meta(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "knn_median": _round(self.knn_median),
            "knn_p90": _round(self.knn_p90),
            "model": self.model,
            "rows": self.rows,
            "recipe": self.recipe,
            "probes": self.probes,
            "measured_at": round(self.measured_at, 3),
        }

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any]) -> Calibration:
        return cls(
            knn_median=meta.get("knn_median"),
            knn_p90=meta.get("knn_p90"),
            model=str(meta.get("model") or ""),
            rows=int(meta.get("rows") or 0),
            recipe=str(meta.get("recipe") or ""),
            probes=int(meta.get("probes") or 0),
            measured_at=float(meta.get("measured_at") or 0.0),
            version=int(meta.get("version") or 0),
        )


def recipe_of(settings: Settings) -> str:
    """What decides which hits a question's best similarity is read from: the strategy
    and fusion, how many candidates each side and the context consider, and feedback."""
    fusion: str = settings.fusion
    if fusion == "zscore":  # named by what it reads, so a calibration under plain z is stale
        fusion += "".join(f"+log({name})" for name in sorted(LOG_SCORES))
    recipe = (
        f"{settings.strategy}/{fusion}/k={settings.context_candidates}"
        f"/window={settings.rank_window_size}/candidates={settings.num_candidates}"
    )
    if settings.feedback_chunks:
        recipe += (
            f"/feedback={settings.feedback_chunks}:{settings.feedback_terms}"
            f":{settings.feedback_weight:g}"
        )
    return recipe


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def probe_question(text: str, rng: random.Random) -> str | None:
    """A question-sized span of one sentence of ``text``: 6-14 words, or 8-20 Han
    characters; None when the text has no sentence that long."""
    sentences = [s.strip() for s in _SENTENCE_RE.split(text) if s and s.strip()]
    rng.shuffle(sentences)
    for sentence in sentences:
        if len(_HAN_RE.findall(sentence)) >= len(sentence) / 3:
            if len(sentence) < 8:
                continue
            size = min(len(sentence), rng.randint(8, 20))
            start = rng.randint(0, len(sentence) - size)
            return sentence[start : start + size]
        words = sentence.split()
        if len(words) < 6:
            continue
        size = min(len(words), rng.randint(6, 14))
        start = rng.randint(0, len(words) - size)
        return " ".join(words[start : start + size])
    return None


def calibrate(
    searcher: Searcher,
    *,
    probes: int = PROBES,
    seed: int = 0,
    rows: int | None = None,
    spans: int = SPANS_PER_CHUNK,
) -> Calibration:
    """Ask the index questions it cannot answer, and record how well they still score.

    Each probe is a span of a sampled chunk, asked by someone who may read that chunk
    with the chunk's whole document filtered out: the best similarity a question reaches
    when its answer is missing, in this index, with this model. (Asked with the document
    present the spans score too easily to say anything about real questions.) An index
    of fewer than ``probes`` chunks is read again, up to ``spans`` times, for other spans
    of the same chunks: with one probe a chunk, the 90th percentile of a 17-chunk index
    rests on its top two probes. An index with fewer than ``MIN_PROBES`` chunks to probe
    gets no further spans, hence no dense threshold: four spans of three chunks describe
    three chunks, not the index's background. ``rows``: the index's searchable chunks,
    when the caller has just counted them.
    """
    served = searcher.generation()
    engine = searcher.engine
    if rows is None:
        rows = engine.count(served.index, build.CHILDREN_ONLY)
    body = {
        "size": probes * 2,
        "_source": ["content", "doc_id", "tenant_id", "visibility", "allowed_principals"],
        "query": {
            "function_score": {
                "query": {"bool": {"filter": [build.CHILDREN_ONLY]}},
                "random_score": {"seed": seed, "field": "_seq_no"},
                "boost_mode": "replace",
            }
        },
    }
    sampled = [hit["_source"] for hit in engine.search(served.index, body)["hits"]["hits"]]
    rng = random.Random(seed)
    negatives: list[Signals] = []
    asked: set[tuple[str, str]] = set()
    k = searcher.settings.context_candidates
    for _ in range(max(1, spans)):
        for src in sampled:
            if len(negatives) >= probes:
                break
            question = probe_question(src.get("content") or "", rng)
            if question is None or (src["doc_id"], question) in asked:
                continue
            asked.add((src["doc_id"], question))
            caller = _reader(src)
            without = {"bool": {"must_not": [{"term": {"doc_id": src["doc_id"]}}]}}
            response = searcher.search(
                question, caller=caller, k=k, clauses=[without], rerank=False
            )
            negatives.append(signals(searcher, question, response, caller))
        if len(negatives) >= probes or len(negatives) < MIN_PROBES:
            break  # full; or too few chunks for a threshold, however many spans each gave
    return from_probes(
        negatives,
        model=served.embedder.embedding_version,
        rows=rows,
        recipe=recipe_of(searcher.settings),
    )


def from_probes(
    negatives: Sequence[Signals], *, model: str, rows: int, recipe: str = ""
) -> Calibration:
    knn = [float(v) for r in negatives if (v := r.get("best_knn")) is not None]
    enough = len(knn) >= MIN_PROBES
    # deciles with linear interpolation between order statistics (numpy's default)
    deciles = statistics.quantiles(knn, n=10, method="inclusive") if enough else None
    return Calibration(
        knn_median=deciles[4] if deciles else None,
        knn_p90=deciles[8] if deciles else None,
        model=model,
        rows=rows,
        recipe=recipe,
        probes=len(negatives),
        measured_at=time.time(),
        negatives=list(negatives),
    )


def _reader(source: Mapping[str, Any]) -> Caller:
    """Someone who may read this chunk: for a restricted one, its first allowed principal."""
    allowed = list(source.get("allowed_principals") or [])
    principals = frozenset(allowed[:1]) if source.get("visibility") != "public" else frozenset()
    return Caller(tenant=source["tenant_id"], principals=principals)


# --- the decision --------------------------------------------------------------------------
@dataclass(frozen=True)
class Verdict:
    sufficient: bool
    reason: str
    knn_threshold: float | None = None


def decide(
    found: Mapping[str, Any],
    calibration: Calibration | None,
    *,
    strictness: float,
    min_coverage: float,
) -> Verdict:
    """Sufficient when the evidence names enough of the question and, where there is a
    dense similarity and a calibration, it clears the index's unanswerable background."""
    coverage = found.get("coverage")
    if coverage is not None and coverage < min_coverage:
        return Verdict(
            False,
            f"the evidence holds {coverage:.2f} of the question's terms (weighted by rarity), "
            f"below {min_coverage:g}",
        )
    threshold = calibration.knn_threshold(strictness) if calibration else None
    best = found.get("best_knn")
    if threshold is None or best is None:
        why = "no dense similarity in these hits" if best is None else "no calibration yet"
        return Verdict(True, f"lexical check only ({why}): the evidence names the question")
    if best < threshold:
        return Verdict(
            False,
            f"best dense similarity {best:.3f} is below {threshold:.3f}, where questions "
            "this index cannot answer score",
            threshold,
        )
    return Verdict(True, f"best dense similarity {best:.3f} >= {threshold:.3f}", threshold)


# --- where a process keeps it ----------------------------------------------------------------
RECHECK_S = 300.0  # how often a process looks whether its calibration went stale


@dataclass
class _Held:
    calibration: Calibration
    checked: float


_HELD: dict[tuple[int, str], _Held] = {}
_MEASURING = threading.Lock()  # one calibration at a time per process (serve's threads)


def current(searcher: Searcher, *, force: bool = False) -> Calibration:
    """The served index's calibration: this process's copy, the one in ``_meta``, or a new
    one measured now and written there (so every process judges alike).

    A calibration goes stale with a new model, another retrieval recipe or an index
    grown or shrunk by ``REGROWTH``; it is looked at again every ``RECHECK_S`` seconds.
    """
    served = searcher.generation()
    key = (id(searcher.engine), served.index)
    held = _HELD.get(key)
    if held and not force and time.monotonic() - held.checked < RECHECK_S:
        return held.calibration
    with _MEASURING:
        held = _HELD.get(key)  # another thread may have measured it while this one waited
        if held and not force and time.monotonic() - held.checked < RECHECK_S:
            return held.calibration
        return _refresh(searcher, served.index, key, force=force)


def _refresh(searcher: Searcher, index: str, key: tuple[int, str], *, force: bool) -> Calibration:
    served = searcher.generation()
    engine = searcher.engine
    rows = engine.count(index, build.CHILDREN_ONLY)
    model = served.embedder.embedding_version
    meta = engine.mapping(index).get("_meta") or {}
    stored = meta.get(META_KEY)
    calibration = Calibration.from_meta(stored) if isinstance(stored, dict) else None
    recipe = recipe_of(searcher.settings)
    if force or calibration is None or calibration.stale(model=model, rows=rows, recipe=recipe):
        calibration = calibrate(searcher, rows=rows)
        try:
            engine.put_meta(index, {**meta, META_KEY: calibration.to_meta()})
        except EsRagError as exc:  # a key that may search but not manage: keep it here
            log.warning("sufficiency: cannot store the calibration in _meta (%s)", exc)
    _HELD[key] = _Held(calibration, time.monotonic())
    return calibration
