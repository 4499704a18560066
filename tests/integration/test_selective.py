"""Very selective filters: a tenant owning 0.5% of the index still gets k visible kNN hits."""

from __future__ import annotations

import pytest

from es_rag.acl import make_acl, make_caller
from es_rag.config import Settings
from es_rag.engine.client import Engine
from es_rag.pipeline import Ingestor
from es_rag.query.search import Searcher
from es_rag.types import Document
from tests.conftest import unique_index
from tests.integration.conftest import drop_alias

pytestmark = pytest.mark.integration

TOPICS = [
    "invoices",
    "shipping",
    "returns",
    "warranty",
    "payments",
    "accounts",
    "orders",
    "coupons",
    "delivery",
    "pricing",
]


def test_tiny_tenant_gets_k_hits(
    es_url: str,
    minilm_path: str,
    engine: Engine,
    embedder,
    analyzer,  # type: ignore[no-untyped-def]
) -> None:
    settings = Settings(
        es_url=es_url,
        index=unique_index("selective"),
        embedding_model=minilm_path,
        num_candidates=50,
        rank_window_size=50,
    )
    ingestor = Ingestor(settings, client=engine, embedder=embedder, analyzer=analyzer)
    big, tiny = make_acl("big", public=True), make_acl("tiny", public=True)
    docs = [
        Document(
            doc_id=f"big-{i}",
            text=f"Note {i} about {TOPICS[i % 10]} and the "
            f"refund policy for customers in region {i % 37}.",
            acl=big,
        )
        for i in range(1990)
    ]
    docs += [
        Document(
            doc_id=f"tiny-{i}", text=f"Greenhouse log {i}: tomato seedlings watered.", acl=tiny
        )
        for i in range(10)
    ]
    try:
        for start in range(0, len(docs), 250):
            results = ingestor.ingest_many(docs[start : start + 250])
            assert all(r.status == "indexed" for r in results)
        ingestor.index.refresh()
        searcher = Searcher(settings, client=engine, embedder=embedder, analyzer=analyzer)
        caller = make_caller("tiny", users=["user:t"])
        # A query close to the big tenant's documents: the unfiltered graph walk would only
        # meet big-tenant vectors; pre-filtering must still return the tiny tenant's k rows.
        for strategy in ("knn", "client-rrf"):
            hits = searcher.search(
                "refund policy for customers", caller=caller, k=10, strategy=strategy
            ).hits
            assert len(hits) == 10, strategy
            assert all(h.doc_id.startswith("tiny-") for h in hits)
    finally:
        drop_alias(engine, settings.index)
