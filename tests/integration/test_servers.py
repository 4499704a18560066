"""The local servers the session started (or reused) are real and answer."""

from __future__ import annotations

import httpx
import pytest
import redis

from es_rag.config import Settings
from es_rag.engine.client import Engine, detect_flavor

pytestmark = pytest.mark.integration


def test_search_server_is_up(es_url: str, engine: Engine, engine_name: str) -> None:
    health = httpx.get(f"{es_url}/_cluster/health", timeout=10).json()
    assert health["status"] in ("green", "yellow")
    info = engine.probe("no-such-index")
    assert info.flavor == engine_name
    major = info.version.split(".")[0]
    assert major in (("8", "9") if engine_name == "elasticsearch" else ("2", "3"))


def test_engine_is_detected_from_the_server(es_url: str, engine_name: str) -> None:
    assert detect_flavor(Settings(es_url=es_url)) == engine_name


def test_redis_is_up(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    try:
        assert client.ping() is True
        client.set("es-rag:test", "ok", ex=10)
        assert client.get("es-rag:test") == b"ok"
    finally:
        client.close()
