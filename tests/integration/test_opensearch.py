"""OpenSearch-only behaviour on the real server: the k-NN engine guard and the mapping.

The test server's k-NN plugin ships no native libraries: a faiss index would kill the node
at its first refresh. es-rag must refuse it before anything is written.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from es_rag.config import Settings
from es_rag.engine.client import make_engine
from es_rag.engine.opensearch import OpenSearchEngine
from es_rag.errors import ConfigurationError
from es_rag.pipeline import Ingestor
from tests.conftest import ENGINES, unique_index
from tests.integration.conftest import drop_alias

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def os_url(request: pytest.FixtureRequest) -> str:
    if "opensearch" not in ENGINES:
        pytest.skip("OpenSearch-only; ES_RAG_TEST_ENGINES leaves OpenSearch out")
    url: str = request.getfixturevalue("opensearch_url")
    return url


def alive(url: str) -> bool:
    return httpx.get(f"{url}/_cluster/health", timeout=10).json()["status"] in ("green", "yellow")


@pytest.mark.parametrize(
    "overrides",
    [
        {"opensearch_knn_engine": "faiss", "vector_index_type": "hnsw"},
        {"opensearch_knn_engine": "nmslib", "vector_index_type": "hnsw"},
    ],
)
def test_native_engine_is_refused_before_anything_is_written(
    os_url: str, minilm_path: str, embedder: Any, analyzer: Any, overrides: dict[str, str]
) -> None:
    settings = Settings(
        es_url=os_url,
        engine="opensearch",
        index=unique_index("guard"),
        embedding_model=minilm_path,
        **overrides,  # type: ignore[arg-type]
    )
    engine = make_engine(settings)
    ingestor = Ingestor(settings, client=engine, embedder=embedder, analyzer=analyzer)
    with pytest.raises(ConfigurationError, match=overrides["opensearch_knn_engine"]) as info:
        ingestor.init_index()
    assert "Nothing was written" in str(info.value) and "lucene" in str(info.value)
    assert engine.alias_indices(settings.index) == []
    assert engine.list_indices(f"{settings.index}*") == []
    assert alive(os_url)


def test_knn_vector_without_method_is_refused(os_url: str) -> None:
    """3.x gives a method-less knn_vector to faiss: es-rag refuses such a body too."""
    engine = make_engine(Settings(es_url=os_url, engine="opensearch"))
    assert isinstance(engine, OpenSearchEngine)
    name = unique_index("raw")
    body = {
        "settings": {"index": {"knn": True}},
        "mappings": {"properties": {"v": {"type": "knn_vector", "dimension": 2}}},
    }
    with pytest.raises(ConfigurationError, match="'faiss'"):
        engine.create_index(name, body)
    assert not engine.index_exists(name)


def test_the_index_uses_lucene_hnsw_with_the_model_similarity(
    os_url: str, minilm_path: str, embedder: Any, analyzer: Any
) -> None:
    settings = Settings(
        es_url=os_url, engine="opensearch", index=unique_index("map"), embedding_model=minilm_path
    )
    engine = make_engine(settings)
    ingestor = Ingestor(settings, client=engine, embedder=embedder, analyzer=analyzer)
    try:
        name, created = ingestor.init_index()
        assert created
        mapping = engine.mapping(name)
        vector = mapping["properties"]["embedding"]
        assert vector["type"] == "knn_vector" and vector["dimension"] == 384
        assert vector["method"]["engine"] == "lucene" and vector["method"]["name"] == "hnsw"
        assert vector["method"]["space_type"] == "cosinesimil"
        assert vector["method"]["parameters"]["encoder"]["name"] == "sq"
        assert mapping["properties"]["metadata"]["type"] == "flat_object"
        assert mapping["_meta"]["embedding_version"] == embedder.embedding_version
        index_settings = engine.client.indices.get_settings(index=name)[name]["settings"]
        assert index_settings["index"]["knn"] in ("true", True)
    finally:
        drop_alias(engine, settings.index)
