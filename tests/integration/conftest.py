from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from elasticsearch import Elasticsearch

from es_rag.analysis import TextAnalyzer
from es_rag.config import Settings
from es_rag.embedding import SentenceTransformerEmbedder
from es_rag.pipeline import Ingestor
from es_rag.query.search import Searcher
from tests.conftest import unique_index


@pytest.fixture(scope="session")
def es_client(es_url: str) -> Iterator[Elasticsearch]:
    client = Elasticsearch(es_url, request_timeout=60)
    yield client
    client.close()


@pytest.fixture(scope="session")
def embedder(minilm_path: str) -> SentenceTransformerEmbedder:
    """One MiniLM for the session: loading it is the slow part of every test."""
    return SentenceTransformerEmbedder(model=minilm_path, batch_size=32)


@pytest.fixture(scope="session")
def analyzer() -> TextAnalyzer:
    return TextAnalyzer("english")


def drop_alias(client: Elasticsearch, alias: str) -> None:
    if client.indices.exists_alias(name=alias):
        for name in client.indices.get_alias(name=alias).body:
            client.indices.delete(index=name, ignore_unavailable=True)


@pytest.fixture
def make_settings(
    es_url: str, minilm_path: str, es_client: Elasticsearch
) -> Iterator[Callable[..., Settings]]:
    """Settings for a fresh, uniquely named index that is deleted after the test."""
    made: list[str] = []

    def factory(**overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "es_url": es_url,
            "index": unique_index(),
            "embedding_model": minilm_path,
            "chunk_size": 120,
            "chunk_overlap": 20,
            **overrides,
        }
        made.append(values["index"])
        return Settings(**values)

    yield factory
    for alias in made:
        drop_alias(es_client, alias)


@pytest.fixture
def ingestor_for(
    es_client: Elasticsearch, embedder: SentenceTransformerEmbedder, analyzer: TextAnalyzer
) -> Callable[[Settings], Ingestor]:
    def factory(settings: Settings) -> Ingestor:
        return Ingestor(settings, client=es_client, embedder=embedder, analyzer=analyzer)

    return factory


@pytest.fixture
def searcher_for(
    es_client: Elasticsearch, embedder: SentenceTransformerEmbedder, analyzer: TextAnalyzer
) -> Callable[[Settings], Searcher]:
    def factory(settings: Settings) -> Searcher:
        return Searcher(settings, client=es_client, embedder=embedder, analyzer=analyzer)

    return factory
