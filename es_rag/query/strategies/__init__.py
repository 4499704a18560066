"""Retrieval strategies: one registry, and the pure choice of what ``auto`` runs.

A new strategy is one module with a ``Strategy`` subclass and one line in ``REGISTRY``.
"""

from __future__ import annotations

from collections.abc import Callable

from es_rag.config import Settings
from es_rag.engine.base import ClusterInfo
from es_rag.errors import ConfigurationError, StrategyUnavailableError
from es_rag.query.strategies.base import Query, Request, Strategy
from es_rag.query.strategies.client import ClientLinear, ClientRRF, ClientZScore
from es_rag.query.strategies.server import NativeRRF, OpenSearchHybrid
from es_rag.query.strategies.single import BM25, KNN

REGISTRY: dict[str, Strategy] = {
    s.name: s
    for s in (
        BM25(),
        KNN(),
        ClientRRF(),
        ClientLinear(),
        ClientZScore(),
        NativeRRF(),
        OpenSearchHybrid(),
    )
}
NAMES = ("auto", *REGISTRY)

__all__ = ["NAMES", "REGISTRY", "Query", "Request", "Strategy", "resolve"]


def resolve(
    requested: str | None, settings: Settings, cluster: Callable[[], ClusterInfo]
) -> tuple[Strategy, str | None]:
    """(the strategy that will run, a note explaining an automatic choice).

    Pure but for ``cluster``, the probe, which is asked only when the answer depends on it:
    ``auto`` is score fusion here, on any cluster, with ``ES_RAG_FUSION=zscore`` (the
    default) or ``linear``: no cluster computes z-score fusion as it is defined here. With
    ``ES_RAG_FUSION=rrf`` it takes the server's fusion where it runs (native RRF, the
    OpenSearch hybrid query), else client-side RRF and says why. A forced strategy the
    cluster cannot run is an error.
    """
    name = requested or settings.strategy
    if name not in NAMES:
        raise ConfigurationError(f"unknown strategy {name!r}; expected one of {NAMES}")
    if name == "auto":
        if settings.fusion != "rrf":  # score fusion runs here, on any cluster
            return REGISTRY[f"client-{settings.fusion}"], None
        info = cluster()
        for candidate in ("native-rrf", "opensearch-hybrid"):
            if REGISTRY[candidate].available(info)[0]:
                return REGISTRY[candidate], None
        if info.flavor == "opensearch":
            return REGISTRY["client-rrf"], f"opensearch-hybrid unavailable: {info.hybrid_reason}"
        return REGISTRY["client-rrf"], f"native RRF unavailable: {info.native_rrf_reason}"
    strategy = REGISTRY[name]
    if strategy.needs_cluster:
        ok, why = strategy.available(cluster())
        if not ok:
            raise StrategyUnavailableError(f"{name} cannot run: {why}")
    return strategy, None
