"""What every retrieval strategy is: pure request bodies in, pure ranked hits out.

A strategy never talks to the server. ``bodies`` turns a ``Query`` (everything already
analysed, embedded and filtered) into a ``Request``; the ``Searcher`` checks it with the
ACL guard, sends it through the ``Engine`` and hands the responses to ``hits``. What
differs between engines (the kNN clause's shape) is asked of the ``Engine``, whose
builders are pure too.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from es_rag.config import Settings
from es_rag.query import build
from es_rag.types import Hit

if TYPE_CHECKING:
    from es_rag.engine.base import ClusterInfo, Engine


@dataclass(frozen=True)
class Query:
    """One question, ready for any strategy: analysed, embedded, filtered, sized."""

    text: str  # the question as asked (highlighting matches it on ``content``)
    terms: str  # es-rag's analysis of it, for BM25 on the terms fields ("" when unused)
    vector: Sequence[float]  # its embedding ([] when unused)
    acl: dict[str, Any]  # the caller's ACL clause, for every retriever
    filters: Sequence[dict[str, Any]]  # user filters, for every retriever
    depth: int  # hits wanted (k, or the rerank window)
    window: int  # each retriever's window for fusion (never below depth)
    settings: Settings
    highlight: dict[str, Any] | None = None
    # Pseudo-relevance feedback's terms and boosts for BM25 (es_rag.query.feedback)
    expansion: tuple[tuple[str, float], ...] = ()
    # Its sentences and their embeddings, for a question of two or more (question_sentences)
    sentences: tuple[str, ...] = ()
    sentence_vectors: tuple[Sequence[float], ...] = ()

    @property
    def num_candidates(self) -> int:
        return max(self.settings.num_candidates, self.window)

    @property
    def weights(self) -> dict[str, float]:
        return {"bm25": self.settings.bm25_weight, "knn": self.settings.knn_weight}


@dataclass(frozen=True)
class Request:
    """What to send: one ``_search`` body (with params), or ``_msearch`` header/body pairs.

    ``pipeline`` names a search pipeline (and its definition) that must exist first.
    """

    body: dict[str, Any] | None = None
    params: dict[str, Any] = field(default_factory=dict)
    searches: list[dict[str, Any]] | None = None
    pipeline: tuple[str, dict[str, Any]] | None = None


class Strategy(ABC):
    """One way of ranking. Subclasses are stateless; one instance serves every query."""

    name: ClassVar[str]
    uses_terms: ClassVar[bool] = True  # needs the analysed question
    uses_vector: ClassVar[bool] = True  # needs the question's embedding
    fuses_here: ClassVar[bool] = False  # fusion runs in hits(): timed apart ("fuse")
    needs_cluster: ClassVar[bool] = False  # runs only where the probe says it can
    # Its searches return ids and scores only: the Searcher fetches the rows it keeps.
    fetches_rows: ClassVar[bool] = False
    # Asks a many-sentence question's sentences as kNN searches of their own.
    asks_sentences: ClassVar[bool] = False

    def available(self, cluster: ClusterInfo) -> tuple[bool, str]:
        """(whether this cluster can run it, why not)."""
        return True, ""

    @abstractmethod
    def bodies(self, q: Query, engine: Engine) -> Request:
        """The request(s), pure: no I/O."""

    @abstractmethod
    def hits(self, responses: list[dict[str, Any]], q: Query) -> list[Hit]:
        """The ranked hits, pure: no I/O. ``responses`` are in the order sent."""

    def again(
        self, q: Query, engine: Engine, first: list[dict[str, Any]]
    ) -> tuple[Request, Callable[[list[dict[str, Any]]], list[dict[str, Any]]]]:
        """The request for the expanded question of pseudo-relevance feedback, and how its
        responses join the first round's into what ``hits`` reads. Only the BM25 side
        changes; a strategy that runs the two sides apart resends that side alone."""
        return self.bodies(q, engine), lambda responses: responses


def bm25_query(q: Query) -> dict[str, Any]:
    """The BM25 query of ``q``, as every strategy that runs BM25 sends it."""
    s = q.settings
    return build.bm25_query(
        q.terms,
        acl=q.acl,
        filters=q.filters,
        content_boost=s.content_boost,
        title_boost=s.title_boost,
        expansion=q.expansion,
    )


def bm25_body(q: Query, size: int) -> dict[str, Any]:
    """The BM25 search of ``q`` for ``size`` hits (with the highlight, when asked)."""
    return with_highlight(build.hits_body(size, query=bm25_query(q)), q)


def with_highlight(body: dict[str, Any], q: Query) -> dict[str, Any]:
    """The body with the question's highlight, when highlighting is on."""
    return {**body, "highlight": q.highlight} if q.highlight else body
