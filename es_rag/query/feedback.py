"""Pseudo-relevance feedback: the words of the best evidence, added to the question.

A question and the passages that answer it often name the same thing in different words
("heat transfer" against "thermal conductivity"); BM25 cannot see that, kNN partly can.
After the first fused ranking, the analysed terms of its top few chunks are pooled (each
chunk's term frequencies divided by its length, so a long chunk does not outvote the
others: the relevance model of Lavrenko & Croft, SIGIR 2001, with the chunks weighted
equally), the strongest become extra ``term`` clauses of the BM25 search with boosts up
to ``weight``, and the search is fused again (client-side fusion reruns only BM25; a
server that fuses reruns both). BM25's own idf then weighs each expansion term, so a term
common to the whole collection adds little.

How much the expansion counts depends on how far the two retrievers agree
(:func:`agreement`): the top of a fused ranking that only one retriever stands behind is
the weaker retriever's guess as often as not, and expanding with its words drifts.

Pure: term strings in, (term, boost) pairs out. The searcher fetches the terms under the
caller's ACL (only chunks the caller has just retrieved), so nothing it may not read can
shape its expansion. Measured on seven dev collections in the README ("Pseudo-relevance
feedback").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

AGREEMENT_TOP = 10


def expansion(
    chunk_terms: Sequence[str], *, question: str, terms: int, weight: float
) -> tuple[tuple[str, float], ...]:
    """The ``terms`` strongest terms of ``chunk_terms`` (each one chunk's analysed,
    space-separated terms) with boosts proportional to their pooled weight, the strongest
    at ``weight``. Ties go to the term seen first, so the result is deterministic.

    Only chunks that share a term with ``question`` (analysed the same way) take part: a
    chunk that the dense side alone brought up may be about something else entirely (an
    error code asked for by its name has no meaning a sentence model knows), and its
    words would pull BM25 away from the one row that holds the code."""
    asked = set(question.split())
    pooled: dict[str, float] = {}
    chunks = [c.split() for c in chunk_terms]
    chunks = [c for c in chunks if asked.intersection(c)]
    for words in chunks:
        counts = Counter(words)
        for term, n in counts.items():
            pooled[term] = pooled.get(term, 0.0) + n / len(words) / len(chunks)
    top = sorted(pooled.items(), key=lambda item: -item[1])[:terms]  # stable: ties keep order
    if not top or weight <= 0:
        return ()
    strongest = top[0][1]
    return tuple((term, weight * value / strongest) for term, value in top)


def agreement(
    ranks: Sequence[Mapping[str, int | None]], *, top: int = AGREEMENT_TOP
) -> float | None:
    """The share of the fused top ``top`` (fewer where fewer were found) that every
    retriever also ranked in its own top ``top`` (``ranks``: each fused hit's rank per
    retriever, best first); ``None`` when the hits carry no per-retriever ranks
    (OpenSearch's hybrid query reports none).

    Measured on six dev collections, scaling the expansion's weight by this share kept
    feedback's gains where BM25 and kNN are both reasonable and removed its losses where
    one is far weaker (LISA, DuReader), without a threshold to choose."""
    head = list(ranks[:top])
    if not head or all(r is None for hit in head for r in hit.values()):
        return None
    both = sum(1 for hit in head if all(r is not None and r <= top for r in hit.values()))
    return both / len(head)
