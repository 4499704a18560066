"""Engine choice and strategy choice per engine: pure logic, no server."""

from __future__ import annotations

import pytest
from elasticsearch import Elasticsearch
from opensearchpy import OpenSearch

from es_rag.config import Settings
from es_rag.engine.base import ClusterInfo, node_summary
from es_rag.engine.client import engine_for_client
from es_rag.engine.elastic import ElasticsearchEngine
from es_rag.engine.opensearch import OpenSearchEngine, _knn_engines_in, hybrid_support
from es_rag.errors import ConfigurationError, StrategyUnavailableError
from es_rag.parts import Parts
from es_rag.query.search import Searcher

pytestmark = pytest.mark.unit


def test_clients_are_wrapped_by_type_without_io() -> None:
    es = engine_for_client(Elasticsearch("http://127.0.0.1:1"))
    os_ = engine_for_client(OpenSearch(hosts=["http://127.0.0.1:1"]))
    assert isinstance(es, ElasticsearchEngine) and es.flavor == "elasticsearch"
    assert isinstance(os_, OpenSearchEngine) and os_.flavor == "opensearch"
    assert engine_for_client(es) is es
    with pytest.raises(ConfigurationError, match="not object"):
        engine_for_client(object())


def test_parts_take_a_client_and_expose_the_engine() -> None:
    client = OpenSearch(hosts=["http://127.0.0.1:1"])
    parts = Parts(Settings(), client=client)
    assert parts.engine.flavor == "opensearch" and parts.client is client


def test_named_engine_needs_no_detection() -> None:
    parts = Parts(Settings(engine="opensearch", es_url="http://127.0.0.1:1"))
    assert isinstance(parts.engine, OpenSearchEngine)  # no request was needed to build it


def test_opensearch_refuses_an_api_key() -> None:
    with pytest.raises(ConfigurationError, match="USERNAME"):
        Parts(Settings(engine="opensearch", es_api_key="abc")).engine  # noqa: B018


def test_node_summary() -> None:
    body = {
        "nodes": {
            "x": {
                "version": "3.5.0",
                "plugins": [{"name": "opensearch-knn"}],
                "modules": [{"name": "reindex"}, {"name": "analysis-common"}],
            }
        }
    }
    assert node_summary(body) == ("3.5.0", ("analysis-common", "opensearch-knn", "reindex"))
    assert node_summary({}) == ("unknown", ())


@pytest.mark.parametrize(
    ("version", "plugins", "ok", "why"),
    [
        ("3.5.0", ("opensearch-knn",), False, "neural-search plugin is not installed"),
        ("2.18.0", ("opensearch-knn", "opensearch-neural-search"), False, "2.19+"),
        ("2.19.1", ("opensearch-knn", "opensearch-neural-search"), True, ""),
        ("3.5.0", ("opensearch-knn", "opensearch-neural-search"), True, ""),
    ],
)
def test_hybrid_support(version: str, plugins: tuple[str, ...], ok: bool, why: str) -> None:
    got, reason = hybrid_support(version, plugins)
    assert got is ok and why in reason


def test_knn_engines_found_in_a_body_default_to_faiss() -> None:
    props = {
        "a": {"type": "knn_vector", "dimension": 2, "method": {"engine": "lucene"}},
        "b": {"type": "knn_vector", "dimension": 2},
        "o": {"properties": {"c": {"type": "knn_vector", "method": {"engine": "nmslib"}}}},
        "t": {"type": "text"},
    }
    assert _knn_engines_in(props) == [("a", "lucene"), ("b", "faiss"), ("o.c", "nmslib")]


def test_native_engines_only_when_vouched_for() -> None:
    client = OpenSearch(hosts=["http://127.0.0.1:1"])
    assert OpenSearchEngine(client).knn_engines(("opensearch-knn",)) == ("lucene",)
    assert OpenSearchEngine(client, native_knn=True).knn_engines(("opensearch-knn",)) == (
        "lucene",
        "faiss",
        "nmslib",
    )
    assert OpenSearchEngine(client).knn_engines(()) == ()


def opensearch_searcher(hybrid: bool, fusion: str = "rrf") -> Searcher:
    searcher = Searcher(
        Settings(engine="opensearch", fusion=fusion), client=OpenSearch(hosts=["http://x:1"])
    )
    why = "" if hybrid else "the opensearch-neural-search plugin is not installed"
    searcher._cluster = ClusterInfo(
        flavor="opensearch",
        version="3.5.0",
        license_type=None,
        native_rrf=False,
        native_rrf_reason="the rrf retriever is Elasticsearch's",
        plugins=("opensearch-knn",),
        hybrid=hybrid,
        hybrid_reason=why,
        knn_engines=("lucene",),
    )
    return searcher


def test_auto_picks_the_hybrid_query_where_neural_search_runs() -> None:
    # With RRF chosen; the default z-score fusion runs client-side even there.
    assert opensearch_searcher(True).resolve_strategy("auto") == ("opensearch-hybrid", None)
    assert opensearch_searcher(True, "zscore").resolve_strategy("auto") == ("client-zscore", None)
    assert opensearch_searcher(True).resolve_strategy("opensearch-hybrid")[0] == (
        "opensearch-hybrid"
    )


def test_auto_falls_back_to_client_rrf_and_forcing_hybrid_says_why() -> None:
    searcher = opensearch_searcher(False)
    name, note = searcher.resolve_strategy("auto")
    assert name == "client-rrf" and note and "neural-search" in note
    with pytest.raises(StrategyUnavailableError, match="opensearch-hybrid cannot run: the"):
        searcher.resolve_strategy("opensearch-hybrid")
    with pytest.raises(StrategyUnavailableError, match="native-rrf cannot run"):
        searcher.resolve_strategy("native-rrf")


@pytest.mark.parametrize("flavor", ["elasticsearch", "opensearch"])
def test_a_closed_port_is_engine_unavailable_for_both_clients(flavor: str) -> None:
    """Each client's connection error becomes es-rag's EngineUnavailableError, named."""
    from es_rag.engine.client import make_engine
    from es_rag.errors import EngineUnavailableError
    from tests.conftest import free_port

    settings = Settings(engine=flavor, es_url=f"http://127.0.0.1:{free_port()}")  # type: ignore[arg-type]
    engine = make_engine(settings)
    with pytest.raises(EngineUnavailableError, match="count: search server unreachable"):
        engine.count("x", {"match_all": {}})


@pytest.mark.parametrize(
    ("status", "headers", "body", "expected"),
    [
        (200, {"X-Elastic-Product": "Elasticsearch"}, {"version": {"number": "9.2.8"}}, "es"),
        (200, {}, {"version": {"distribution": "opensearch", "number": "3.5.0"}}, "os"),
        (405, {}, {"error": "Incorrect HTTP method for uri [/]"}, "es"),
        (401, {}, {"error": "unauthorized"}, "401"),
        (403, {}, {"error": "forbidden"}, "403"),
    ],
)
def test_engine_detection_reads_the_servers_answer(
    status: int, headers: dict[str, str], body: dict[str, object], expected: str
) -> None:
    """GET / through the elasticsearch client: OpenSearch's answer is read from the
    client's refusal, a 405 is Elasticsearch's integ-test build, 401/403 are named."""
    import http.server
    import json
    import threading

    from es_rag.engine.client import detect_flavor
    from es_rag.errors import EngineError

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            for name, value in {**headers, "Content-Type": "application/json"}.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        settings = Settings(es_url=f"http://127.0.0.1:{server.server_address[1]}")
        if expected in ("401", "403"):
            with pytest.raises(EngineError, match=f"detect engine: {expected} from"):
                detect_flavor(settings)
        else:
            want = {"es": "elasticsearch", "os": "opensearch"}[expected]
            assert detect_flavor(settings) == want
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("flavor", ["elasticsearch", "opensearch"])
def test_the_clients_write_numpy_vectors_as_float32_digits_and_read_them_back_exactly(
    flavor: str,
) -> None:
    """Both clients serialise bodies with orjson: a float32 vector goes as it is, in
    float32's shortest digits (the server parses the same float32 values, from about half
    the bytes of a list of doubles); other keys and values are written as before."""
    import json
    from datetime import datetime, timezone

    import numpy as np

    from es_rag.engine.elastic import make_elasticsearch_client
    from es_rag.engine.opensearch import make_opensearch_client

    settings = Settings(es_url="http://127.0.0.1:1", engine=flavor)  # type: ignore[arg-type]
    if flavor == "elasticsearch":
        client = make_elasticsearch_client(settings)
        ser = client.transport.serializers.get_serializer("application/json")
    else:
        ser = make_opensearch_client(settings).transport.serializer
    vector = np.random.default_rng(7).standard_normal(384).astype(np.float32)
    when = datetime(2026, 12, 5, 9, 30, tzinfo=timezone.utc)
    body = {"embedding": vector, "score": np.float32(0.25), 3: "three", "at": when, "t": "é"}
    raw = ser.dumps(body)
    text = raw.decode() if isinstance(raw, bytes) else raw
    back = json.loads(text)
    assert np.array_equal(np.asarray(back["embedding"], dtype=np.float32), vector)
    assert back["score"] == 0.25 and back["3"] == "three" and back["t"] == "é"
    assert back["at"] == when.isoformat()
    as_doubles = json.dumps({"embedding": vector.tolist()})
    assert len(text) < 0.7 * len(as_doubles)
    assert ser.loads(raw) == back
