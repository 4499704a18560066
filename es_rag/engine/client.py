"""Which engine: from settings, from the server itself, or from a client the caller made.

``ES_RAG_ENGINE=auto`` (the default) asks the server once, at first use: ``GET /`` names
OpenSearch in ``version.distribution``; Elasticsearch answers without it (or, on the
integ-test distribution, with 405), so anything that is not OpenSearch is treated as
Elasticsearch, whose own probe then reports what it is. The question is sent with the
``elasticsearch`` client, which refuses a server that is not Elasticsearch but hands its
answer over with the refusal; so a command on Elasticsearch never imports ``opensearch-py``
(a third of a second of a short command's start).
"""

from __future__ import annotations

from typing import Any

from es_rag.config import Settings
from es_rag.engine.base import ClusterInfo, Engine
from es_rag.errors import ConfigurationError, EngineError, EngineUnavailableError

__all__ = ["ClusterInfo", "Engine", "detect_flavor", "engine_for_client", "make_engine"]


def make_engine(settings: Settings) -> Engine:
    """The engine named by settings (or found by asking the server); the client is built here."""
    flavor = settings.engine if settings.engine != "auto" else detect_flavor(settings)
    if flavor == "opensearch":
        from es_rag.engine.opensearch import OpenSearchEngine, make_opensearch_client

        return OpenSearchEngine(
            make_opensearch_client(settings), native_knn=settings.opensearch_native_knn
        )
    from es_rag.engine.elastic import ElasticsearchEngine, make_elasticsearch_client

    return ElasticsearchEngine(make_elasticsearch_client(settings))


def engine_for_client(client: Any, settings: Settings | None = None) -> Engine:
    """Wrap a client the caller already has (``Elasticsearch`` or ``OpenSearch``)."""
    if isinstance(client, Engine):
        return client
    from elasticsearch import Elasticsearch

    if isinstance(client, Elasticsearch):
        from es_rag.engine.elastic import ElasticsearchEngine

        return ElasticsearchEngine(client)
    from opensearchpy import OpenSearch

    if isinstance(client, OpenSearch):
        from es_rag.engine.opensearch import OpenSearchEngine

        native = settings.opensearch_native_knn if settings else False
        return OpenSearchEngine(client, native_knn=native)
    raise ConfigurationError(
        f"client must be an elasticsearch.Elasticsearch or opensearchpy.OpenSearch, "
        f"not {type(client).__name__}"
    )


def detect_flavor(settings: Settings) -> str:
    """``opensearch`` or ``elasticsearch``, from the server's ``GET /``."""
    from elasticsearch import ApiError, ConnectionTimeout, UnsupportedProductError
    from elasticsearch import ConnectionError as Unreachable

    from es_rag.engine.elastic import make_elasticsearch_client

    if settings.es_api_key is not None:
        # OpenSearch has no API keys: a key means Elasticsearch (checked by its own probe).
        return "elasticsearch"
    client = make_elasticsearch_client(settings)
    try:
        root = client.perform_request("GET", "/", headers={"accept": "application/json"}).body
    except UnsupportedProductError as exc:  # a 2xx from a server that is not Elasticsearch
        root = exc.body
    except (ConnectionTimeout, Unreachable) as exc:
        raise EngineUnavailableError(
            f"detect engine: search server unreachable at {settings.es_url} ({exc})"
        ) from exc
    except ApiError as exc:
        if exc.meta.status in (401, 403):
            raise EngineError(
                f"detect engine: {exc.meta.status} from {settings.es_url}; check the "
                "credentials, or set ES_RAG_ENGINE to skip detection"
            ) from exc
        return "elasticsearch"  # e.g. 405 from Elasticsearch's integ-test distribution
    finally:
        client.close()
    version = root.get("version") if isinstance(root, dict) else None
    if isinstance(version, dict) and version.get("distribution") == "opensearch":
        return "opensearch"
    return "elasticsearch"
