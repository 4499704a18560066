from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from es_rag.analysis import TextAnalyzer
from es_rag.config import Settings
from es_rag.embedding import SentenceTransformerEmbedder
from es_rag.engine.client import Engine, make_engine
from es_rag.parsing import Parser
from es_rag.pipeline import Ingestor
from es_rag.query.search import Searcher
from tests.conftest import unique_index


@pytest.fixture(scope="session")
def engine(es_url: str, engine_name: str) -> Iterator[Engine]:
    """es-rag's engine adapter for the current server: tests read through the same API."""
    made = make_engine(Settings(es_url=es_url, engine=engine_name, es_request_timeout=60))  # type: ignore[arg-type]
    assert made.flavor == engine_name
    yield made
    made.close()


@pytest.fixture(scope="session")
def embedder(minilm_path: str) -> SentenceTransformerEmbedder:
    """One MiniLM for the session: loading it is the slow part of every test."""
    return SentenceTransformerEmbedder(model=minilm_path, batch_size=32)


@pytest.fixture(scope="module")
def parser() -> Iterator[Parser]:
    """One parser per test module, default settings: its sandbox server warms once per
    format family."""
    made = Parser(Settings())
    yield made
    made.close()


@pytest.fixture(scope="session")
def analyzer() -> TextAnalyzer:
    return TextAnalyzer("english")


def drop_alias(engine: Engine, alias: str) -> None:
    """Every generation of the alias: the served one, a migration's mirror, leftovers."""
    from es_rag.generations import generation_number

    names = set(engine.alias_indices(alias)) | set(engine.alias_indices(f"{alias}-mirror"))
    names |= {n for n in engine.list_indices(f"{alias}-*") if generation_number(alias, n)}
    for name in sorted(names):
        engine.delete_index(name)


@pytest.fixture
def make_settings(
    es_url: str, minilm_path: str, engine: Engine
) -> Iterator[Callable[..., Settings]]:
    """Settings for a fresh, uniquely named index that is deleted after the test."""
    made: list[str] = []

    def factory(**overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "es_url": es_url,
            "engine": engine.flavor,
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
        drop_alias(engine, alias)


@pytest.fixture
def ingestor_for(
    engine: Engine, embedder: SentenceTransformerEmbedder, analyzer: TextAnalyzer
) -> Callable[[Settings], Ingestor]:
    def factory(settings: Settings) -> Ingestor:
        return Ingestor(settings, client=engine, embedder=embedder, analyzer=analyzer)

    return factory


@pytest.fixture
def searcher_for(
    engine: Engine, embedder: SentenceTransformerEmbedder, analyzer: TextAnalyzer
) -> Callable[[Settings], Searcher]:
    def factory(settings: Settings) -> Searcher:
        return Searcher(settings, client=engine, embedder=embedder, analyzer=analyzer)

    return factory


@pytest.fixture
def env(
    es_url: str, redis_url: str, minilm_path: str, engine: Engine, engine_name: str
) -> Iterator[dict[str, str]]:
    values = {
        **os.environ,
        "ES_RAG_ES_URL": es_url,
        "ES_RAG_ENGINE": engine_name,
        "ES_RAG_REDIS_URL": redis_url,
        "ES_RAG_INDEX": unique_index("queue"),
        "ES_RAG_QUEUE": f"test-{uuid.uuid4().hex[:8]}",
        "ES_RAG_EMBEDDING_MODEL": minilm_path,
        "ES_RAG_CHUNK_SIZE": "120",
        "ES_RAG_CHUNK_OVERLAP": "20",
        "ES_RAG_TASK_SOFT_TIME_LIMIT": "12",
        "ES_RAG_TASK_TIME_LIMIT": "15",
        "ES_RAG_VISIBILITY_TIMEOUT": "20",
        "ES_RAG_WORKER_LEASE_SECONDS": "6",
        "HF_HUB_OFFLINE": "1",
    }
    yield values
    drop_alias(engine, values["ES_RAG_INDEX"])
    engine.delete_index(f"{values['ES_RAG_INDEX']}-status")
