"""The local servers the session started (or reused) are real and answer."""

from __future__ import annotations

import pytest
import redis
from elasticsearch import Elasticsearch

pytestmark = pytest.mark.integration


def test_elasticsearch_is_up(es_client: Elasticsearch) -> None:
    health = es_client.cluster.health().body
    assert health["status"] in ("green", "yellow")
    nodes = es_client.nodes.info(node_id="_local", filter_path="nodes.*.version").body
    assert next(iter(nodes["nodes"].values()))["version"].split(".")[0] in ("8", "9")


def test_redis_is_up(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    try:
        assert client.ping() is True
        client.set("es-rag:test", "ok", ex=10)
        assert client.get("es-rag:test") == b"ok"
    finally:
        client.close()
