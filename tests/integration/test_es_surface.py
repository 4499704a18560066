"""The Elasticsearch-compatible surface of ``es-rag serve``, through real clients.

One service per engine over a small handbook: three departments (a facet), Markdown
headings (title paths), one document only alice may read (``finance/merger.md``, the word
``bluebird``), and another tenant's document with the same vocabulary. Every client (the
official Python client 9.x here and 8.x in its own virtualenv, the JavaScript clients 8.x
and 9.x, Elastic's Search UI headless and as a page in Chromium) must see es-rag's hybrid
hits and facets under its key's ACL: the restricted document is in alice's hits and facet
counts and absent from bob's, and the other tenant never appears.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from elasticsearch import ApiError, Elasticsearch, NotFoundError

from es_rag.acl import make_acl
from es_rag.analysis import TextAnalyzer
from es_rag.config import Settings
from es_rag.embedding import SentenceTransformerEmbedder
from es_rag.engine.client import Engine
from es_rag.pipeline import Ingestor
from es_rag.query.filters import field_types
from es_rag.serve.dsl import parse_search
from es_rag.serve.keys import KeyStore
from es_rag.types import Document
from tests.clients.recorder import Recorder
from tests.conftest import ROOT, unique_index
from tests.integration.conftest import drop_alias
from tests.integration.test_serve import Served, _base_env

pytestmark = pytest.mark.integration

sys.path.insert(0, str(ROOT / "scripts"))
import es_surface_canaries as canaries  # noqa: E402

DEMO = ROOT / "scripts" / "search-ui-demo"
ARTIFACTS = ROOT / "results" / "es-surface"
GOLDEN = ROOT / "tests" / "fixtures" / "es_bodies"
ORIGIN = "http://127.0.0.1:{port}"

# (tenant, doc_id, department, ACL, Markdown)
HANDBOOK: list[tuple[str, str, str, dict[str, Any], str]] = [
    (
        "acme",
        "hr/holidays.md",
        "hr",
        {"public": True},
        "# Staff handbook\n\n## Holidays\n\nEvery employee gets twenty-five days of paid "
        "holiday a year. Unused holiday days carry over until March.\n",
    ),
    (
        "acme",
        "hr/sick-leave.md",
        "hr",
        {"public": True},
        "# Staff handbook\n\n## Sick leave\n\nTell your manager before ten in the morning "
        "when you are ill. A doctor's note is needed after three days of sick leave.\n",
    ),
    (
        "acme",
        "finance/expenses.md",
        "finance",
        {"public": True},
        "# Finance guide\n\n## Expenses\n\nTravel expenses are refunded within five working "
        "days when the receipt is attached to the expense claim.\n",
    ),
    (
        "acme",
        "finance/merger.md",
        "finance",
        {"allow": ["user:alice"]},
        "# Finance guide\n\n## Merger\n\nThe merger with Initech is code-named bluebird; the "
        "expense budget for the merger is frozen until the deal closes.\n",
    ),
    (
        "acme",
        "eng/vpn.md",
        "eng",
        {"public": True},
        "# Engineering notes\n\n## VPN\n\nConnect to the VPN before opening the build "
        "servers. The VPN client asks for a hardware token every morning.\n",
    ),
    (
        "acme",
        "eng/oncall.md",
        "eng",
        {"public": True},
        "# Engineering notes\n\n## On call\n\nThe on-call engineer answers pages within "
        "fifteen minutes and writes an incident report for every outage.\n",
    ),
    (
        "globex",
        "finance/merger.md",
        "finance",
        {"public": True},
        "# Globex finance\n\n## Merger\n\nGlobex expense claims and the bluebird merger "
        "budget are handled by the Globex finance team.\n",
    ),
]


TITLES = {"hr": "Staff handbook", "finance": "Finance guide", "eng": "Engineering notes"}


@dataclass
class Surface:
    served: Served
    settings: Settings
    alias: str
    keys: dict[str, str]  # name -> encoded key (what clients take as api_key)
    origin: str
    recorder: Recorder  # clients call through it: what they sent becomes golden bodies
    engine: str

    @property
    def facet(self) -> str:
        """A facet field: a metadata key on Elasticsearch; on OpenSearch, whose flat_object
        keys cannot aggregate, the documents' titles."""
        return "metadata.department" if self.engine == "elasticsearch" else "title.keyword"

    @property
    def finance(self) -> str:
        return "finance" if self.engine == "elasticsearch" else TITLES["finance"]

    @property
    def url(self) -> str:
        return self.recorder.url

    def client(self, who: str) -> Elasticsearch:
        return Elasticsearch(self.url, api_key=self.keys[who], request_timeout=60)

    def post(self, who: str | None, path: str, body: Any, **headers: str) -> httpx.Response:
        if who is not None:
            headers["Authorization"] = f"ApiKey {self.keys[who]}"
        return self.served.http.post(path, json=body, headers=headers)


def _ingest(settings: Settings, engine: Engine, embedder: Any, analyzer: Any) -> None:
    ingestor = Ingestor(settings, client=engine, embedder=embedder, analyzer=analyzer)
    for tenant, doc_id, dept, acl, text in HANDBOOK:
        doc = Document(
            doc_id=doc_id,
            text=text,
            acl=make_acl(tenant, **acl),
            mime_type="text/markdown",
            source_uri=f"file:///handbook/{doc_id}",
            title=TITLES[dept] if tenant == "acme" else "Globex finance",
            metadata={"department": dept},
        )
        ingestor.ingest(doc, refresh=True)


@pytest.fixture(scope="module")
def surface(
    es_url: str,
    engine_name: str,
    redis_url: str,
    minilm_path: str,
    engine: Engine,
    embedder: SentenceTransformerEmbedder,
    analyzer: TextAnalyzer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Surface]:
    tmp = tmp_path_factory.mktemp("es-surface")
    alias = unique_index("surface")
    env = _base_env(es_url, engine_name, redis_url, minilm_path, alias)
    settings = Settings(
        es_url=es_url,
        engine=engine_name,  # type: ignore[arg-type]
        index=alias,
        embedding_model=minilm_path,
        chunk_size=120,
        chunk_overlap=20,
    )
    _ingest(settings, engine, embedder, analyzer)
    store = KeyStore(engine, f"{alias}-keys", cache_seconds=0)
    specs: dict[str, dict[str, Any]] = {
        "alice": {"tenant": "acme", "principals": ["user:alice"]},
        "bob": {"tenant": "acme", "principals": ["user:bob"]},
        "carol": {"tenant": "globex", "principals": ["user:carol"]},
        "elsewhere": {"tenant": "acme", "principals": ["user:alice"], "aliases": ["other"]},
        "ingest": {"tenant": "acme", "principals": [], "role": "ingest"},
    }
    keys = {name: store.create(name=name, **spec).encoded for name, spec in specs.items()}
    origin = ORIGIN.format(port=48123)
    env.update(
        {
            "ES_RAG_KEYS_CACHE_SECONDS": "1",
            "ES_RAG_SERVE_RATE_LIMIT": "1000",
            "ES_RAG_SERVE_CORS_ORIGINS": f"{origin},http://localhost:48123",
            "ES_RAG_QUEUE": f"surface-{uuid.uuid4().hex[:8]}",
        }
    )
    served = Served(env, tmp / "serve.log")
    recorder = Recorder(served.url)
    try:
        yield Surface(served, settings, alias, keys, origin, recorder, engine_name)
    finally:
        recorder.close()
        served.stop()
        drop_alias(engine, alias)
        for name in (f"{alias}-keys", f"{alias}-status"):
            engine.delete_index(name)


def doc_ids(hits: list[dict[str, Any]]) -> list[str]:
    return [h["_source"]["doc_id"] for h in hits]


def buckets(agg: dict[str, Any]) -> dict[str, int]:
    return {b["key"]: b["doc_count"] for b in agg["buckets"]}


def search_ui_like(facet: str) -> dict[str, Any]:
    return {**SEARCH_UI_LIKE, "aggs": {"department": {"terms": {"field": facet, "size": 10}}}}


SEARCH_UI_LIKE = {
    "query": {
        "bool": {
            "must": [
                {
                    "bool": {
                        "should": [
                            {
                                "multi_match": {
                                    "query": "merger expense budget",
                                    "fields": ["title^3", "content"],
                                    "type": "best_fields",
                                    "operator": "and",
                                }
                            },
                            {
                                "multi_match": {
                                    "query": "merger expense budget",
                                    "fields": ["title^3", "content"],
                                    "type": "cross_fields",
                                }
                            },
                            {
                                "multi_match": {
                                    "query": "merger expense budget",
                                    "fields": ["title^3", "content"],
                                    "type": "phrase_prefix",
                                }
                            },
                        ]
                    }
                }
            ]
        }
    },
    "aggs": {"department": {"terms": {"field": "metadata.department", "size": 10}}},
    "highlight": {"fields": {"content": {}}},
    "size": 10,
}


# --- the Python client 9.x -----------------------------------------------------------------
def test_python_client_search_facets_and_acl(surface: Surface) -> None:
    alice, bob, carol = (surface.client(w) for w in ("alice", "bob", "carol"))
    info = alice.info()
    assert info["version"]["number"].startswith("9.")
    assert alice.ping() and not Elasticsearch(surface.url, request_timeout=10).ping()
    uri = alice.search(index=surface.alias, q="title:merger AND budget", size=3)
    assert doc_ids(uri["hits"]["hits"])[0] == "finance/merger.md"

    body = search_ui_like(surface.facet)
    seen = alice.search(index=surface.alias, body=body)
    ids = doc_ids(seen["hits"]["hits"])
    assert "finance/merger.md" in ids[:2], ids
    assert all(h["_index"] == surface.alias for h in seen["hits"]["hits"])
    assert all("embedding" not in h["_source"] for h in seen["hits"]["hits"])
    assert seen["hits"]["total"]["value"] == len(ids) <= 10
    assert seen["hits"]["max_score"] == seen["hits"]["hits"][0]["_score"]
    first = seen["hits"]["hits"][0]
    assert first["_source"]["title_path"], first
    assert any(
        "<em>" in frag
        for h in seen["hits"]["hits"]
        for frag in h.get("highlight", {}).get("content", [])
    )
    alice_facet = buckets(seen["aggregations"]["department"])

    hidden = bob.search(index=surface.alias, body=body)
    bob_ids = doc_ids(hidden["hits"]["hits"])
    assert "finance/merger.md" not in bob_ids and bob_ids
    bob_facet = buckets(hidden["aggregations"]["department"])
    # the facet counts the hits it can read: alice's finance count holds the merger's chunk
    finance = surface.finance
    assert alice_facet[finance] == bob_facet[finance] + ids.count("finance/merger.md")
    for h in hidden["hits"]["hits"]:
        assert "bluebird" not in json.dumps(h).lower()

    # a result's detail page: the chunk by id, for a key that may read it; 404 otherwise
    merger = next(
        h["_id"] for h in seen["hits"]["hits"] if h["_source"]["doc_id"] == "finance/merger.md"
    )
    got = alice.get(index=surface.alias, id=merger, source_includes=["doc_id"])
    assert got["found"] and got["_source"] == {"doc_id": "finance/merger.md"}
    for reader in (bob, carol):
        with pytest.raises(NotFoundError) as missing:
            reader.get(index=surface.alias, id=merger)
        assert missing.value.body == {"_index": surface.alias, "_id": merger, "found": False}
    other = carol.search(index=surface.alias, body=body)
    assert set(doc_ids(other["hits"]["hits"])) == {"finance/merger.md"}
    assert {h["_source"]["tenant_id"] for h in other["hits"]["hits"]} == {"globex"}

    # count says what search's total says; a browse counts rows natively
    assert alice.count(index=surface.alias, query=SEARCH_UI_LIKE["query"])["count"] == len(ids)
    browse_alice = alice.count(index=surface.alias)["count"]
    browse_bob = bob.count(index=surface.alias)["count"]
    assert browse_alice == browse_bob + 1  # the merger is one chunk


def test_python_client_msearch_mapping_field_caps(surface: Surface) -> None:
    bob = surface.client("bob")
    out = bob.msearch(
        index=surface.alias,
        searches=[
            {},
            {"query": {"match": {"content": "holiday days"}}, "size": 3},
            {"index": surface.alias},
            {
                "query": {"match_all": {}},
                "size": 0,
                "aggs": {"n": {"cardinality": {"field": "doc_id"}}},
            },
            {"index": "not-there"},
            {"query": {"match_all": {}}},
            {},
            {"query": {"function_score": {"query": {"match_all": {}}}}},
        ],
    )
    first, second, missing, refused = out["responses"]
    assert first["status"] == 200 and doc_ids(first["hits"]["hits"])[0] == "hr/holidays.md"
    assert second["aggregations"]["n"]["value"] == 5  # acme's public documents
    assert missing["status"] == 404 and missing["error"]["type"] == "index_not_found_exception"
    assert refused["status"] == 400 and "function_score" in refused["error"]["reason"]

    assert bob.indices.exists(index=surface.alias)
    assert not bob.indices.exists(index="not-there")
    assert set(bob.indices.get(index=surface.alias)[surface.alias]) >= {"mappings", "settings"}
    narrow = bob.search(index=surface.alias, q="holiday", source_includes=["doc_id"], size=2)
    assert [set(h["_source"]) for h in narrow["hits"]["hits"]] == [{"doc_id"}] * 2
    mapping = bob.indices.get_mapping(index=surface.alias)
    assert list(mapping) == [surface.alias]
    props = mapping[surface.alias]["mappings"]["properties"]
    assert {"content", "title_path", "metadata", "updated_at"} <= set(props)
    caps = bob.field_caps(index=surface.alias, fields="title*,page_start")
    assert set(caps["fields"]) >= {"title", "title.keyword", "title_path", "page_start"}
    assert caps["fields"]["page_start"]["integer"]["aggregatable"] is True
    assert caps["fields"]["title"]["text"]["aggregatable"] is False


def test_filters_paging_sort_and_explain(surface: Surface) -> None:
    alice = surface.client("alice")
    text = {"multi_match": {"query": "expense budget refunds", "fields": ["content"]}}
    only_finance = alice.search(
        index=surface.alias,
        query={"bool": {"must": [text], "filter": [{"term": {"metadata.department": "finance"}}]}},
        size=10,
        explain=True,
    )
    hits = only_finance["hits"]["hits"]
    assert {h["_source"]["metadata"]["department"] for h in hits} == {"finance"}
    assert hits[0]["_explanation"]["details"], hits[0]
    assert hits[0]["_explanation"]["value"] == hits[0]["_score"]

    not_eng = alice.search(
        index=surface.alias,
        query={"bool": {"must": [text], "must_not": [{"terms": {"metadata.department": ["eng"]}}]}},
    )
    assert "eng" not in {h["_source"]["metadata"]["department"] for h in not_eng["hits"]["hits"]}

    # post_filter narrows the hits, not the facet
    posted = alice.search(
        index=surface.alias,
        query=text,
        post_filter={"term": {"metadata.department": "hr"}},
        aggs={"d": {"terms": {"field": surface.facet}}},
    )
    assert {h["_source"]["metadata"]["department"] for h in posted["hits"]["hits"]} <= {"hr"}
    assert len(buckets(posted["aggregations"]["d"])) > 1

    # paging through the fused list, and a field sort over it
    everything = alice.search(index=surface.alias, query=text, size=20)["hits"]["hits"]
    page2 = alice.search(index=surface.alias, query=text, from_=2, size=2)["hits"]["hits"]
    assert [h["_id"] for h in page2] == [h["_id"] for h in everything[2:4]]
    by_doc = alice.search(index=surface.alias, query=text, sort=[{"doc_id": "asc"}], size=20)
    sorted_ids = doc_ids(by_doc["hits"]["hits"])
    assert sorted_ids == sorted(sorted_ids) and set(sorted_ids) == set(doc_ids(everything))
    with pytest.raises(ApiError) as deep:
        alice.search(index=surface.alias, query=text, from_=45, size=10)
    assert deep.value.meta.status == 400 and "from + size" in str(deep.value.body)

    # a browse: no text, newest first, natively paged
    browse = alice.search(index=surface.alias, query={"match_all": {}}, size=3, _source=["doc_id"])
    assert browse["hits"]["total"]["value"] == 6
    assert all(set(h["_source"]) == {"doc_id"} for h in browse["hits"]["hits"])


def test_errors_answer_like_elasticsearch(surface: Surface) -> None:
    alice = surface.client("alice")
    for index in ("not-there", f"{surface.alias}-1", "other*", f"{surface.alias},not-there"):
        with pytest.raises(NotFoundError) as err:
            alice.search(index=index, query={"match_all": {}})
        assert err.value.body["error"]["type"] == "index_not_found_exception", index
    # a wildcard that resolves to the alias is that alias
    assert alice.search(index=surface.alias[:6] + "*", query={"match_all": {}}, size=1)["hits"]
    # a key for other aliases does not learn that this one exists
    with pytest.raises(NotFoundError):
        surface.client("elsewhere").search(index=surface.alias, query={"match_all": {}})
    refused = {
        "knn": {"knn": {"field": "embedding", "query_vector": [0.1] * 384, "k": 3}},
        "script": {"query": {"script": {"script": "true"}}},
        "suggest": {"suggest": {"s": {"text": "merger", "term": {"field": "content"}}}},
        "collapse": {"collapse": {"field": "doc_id"}},
        "runtime_mappings": {"runtime_mappings": {"x": {"type": "keyword"}}},
        "global": {"aggs": {"all": {"global": {}, "aggs": {"d": {"terms": {"field": "doc_id"}}}}}},
        "tenant_id": {"query": {"term": {"tenant_id": "globex"}}},
        "bogus": {"bogus": 1},
        "rescore": {"rescore": {"window_size": 5}},
    }
    for name, body in refused.items():
        response = surface.post("alice", f"/{surface.alias}/_search", body)
        assert response.status_code == 400, (name, response.text)
        assert response.headers["x-elastic-product"] == "Elasticsearch"
        error = response.json()["error"]
        assert name in error["reason"] and error["root_cause"][0]["type"] == error["type"]
    metadata_facet = {"aggs": {"d": {"terms": {"field": "metadata.department"}}}}
    answer = surface.post("alice", f"/{surface.alias}/_search", metadata_facet)
    if surface.engine == "opensearch":  # flat_object keys give no buckets: said, not wrong
        assert answer.status_code == 400 and "flat_object" in answer.text
    else:
        assert answer.status_code == 200 and answer.json()["aggregations"]["d"]["buckets"]
    unauthenticated = surface.post(None, f"/{surface.alias}/_search", {})
    assert unauthenticated.status_code == 401
    assert unauthenticated.json()["error"]["type"] == "security_exception"
    assert surface.post("ingest", f"/{surface.alias}/_search", {}).status_code == 403


def test_cors(surface: Surface) -> None:
    http = surface.served.http
    path = f"/{surface.alias}/_search"
    preflight = {
        "Origin": surface.origin,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,content-type",
    }
    ok = http.options(path, headers=preflight)
    assert ok.status_code == 200, ok.text
    assert ok.headers["access-control-allow-origin"] == surface.origin
    assert "authorization" in ok.headers["access-control-allow-headers"].lower()
    evil = {**preflight, "Origin": "https://evil.example"}
    refused = http.options(path, headers=evil)
    assert refused.status_code == 403
    assert "access-control-allow-origin" not in refused.headers
    # a credential is never accepted from a disallowed origin, even without a preflight
    posted = surface.post(
        "alice", path, {"query": {"match_all": {}}}, Origin="https://evil.example"
    )
    assert posted.status_code == 403 and "evil.example" in posted.text
    allowed = surface.post("alice", path, {"size": 1}, Origin=surface.origin)
    assert allowed.status_code == 200
    assert allowed.headers["access-control-allow-origin"] == surface.origin


# --- the Python client 8.x, in its own virtualenv ------------------------------------------
def _client8_python() -> Path:
    """scripts/setup.sh makes it beside the main virtualenv."""
    configured = os.environ.get("ES_RAG_TEST_ES8_PYTHON")
    return Path(configured) if configured else Path(sys.prefix).parent / "es-client-8/bin/python"


def test_python_client_8(surface: Surface) -> None:
    python = _client8_python()
    assert python.exists(), f"{python} is missing: run scripts/setup.sh"
    script = ROOT / "tests/clients/python_client.py"
    question = "merger expense budget"
    runs = {}
    for who in ("alice", "bob"):
        done = subprocess.run(
            [
                str(python),
                str(script),
                surface.url,
                surface.keys[who],
                surface.alias,
                question,
                surface.facet,
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        runs[who] = json.loads(done.stdout)
    alice, bob = runs["alice"], runs["bob"]
    assert alice["client"].startswith("8.") and alice["info"].startswith("9.")
    assert "finance/merger.md" in alice["docs"] and "finance/merger.md" not in bob["docs"]
    assert alice["index"] == [surface.alias]
    assert alice["facet"][surface.finance] > bob["facet"].get(surface.finance, 0)
    assert alice["count"] == alice["total"]["value"]
    assert alice["msearch"][0] == alice["ids"][:2]
    assert {"content", "metadata", "title_path"} <= set(alice["mapping"])
    assert "title.keyword" in alice["field_caps"]
    assert alice["missing"] == {"status": 404, "type": "index_not_found_exception"}
    # the 9.x client, in this process, sees the same hits
    same = surface.client("alice").search(
        index=surface.alias,
        query={"multi_match": {"query": question, "fields": ["title", "content"]}},
        size=5,
    )
    assert [h["_id"] for h in same["hits"]["hits"]] == alice["ids"]


# --- JavaScript: the official clients and Search UI --------------------------------------
def _node(script: str, *args: str, timeout: float = 180) -> dict[str, Any]:
    """Run one of scripts/search-ui-demo/test/*.mjs; it prints one JSON object."""
    node = shutil.which("node")
    assert node, "Node 18+ is needed for the JavaScript client tests"
    assert (DEMO / "node_modules").is_dir(), (
        "run scripts/setup.sh (npm ci in scripts/search-ui-demo)"
    )
    done = subprocess.run(
        [node, f"test/{script}", *args],
        cwd=DEMO,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    out: dict[str, Any] = json.loads(done.stdout)
    assert out["ok"], out
    return out


@pytest.mark.parametrize("version", ["8", "9"])
def test_javascript_clients(surface: Surface, version: str) -> None:
    runs = {}
    for who in ("alice", "bob"):
        runs[who] = _node(
            "clients.mjs",
            *("--url", surface.url, "--key", surface.keys[who], "--index", surface.alias),
            *("--query", "merger expense budget", "--facet", surface.facet, "--version", version),
        )
    alice, bob = runs["alice"], runs["bob"]
    assert alice["client"]["version"].startswith(f"{version}.")
    assert alice["info"]["version"].startswith("9.")
    assert alice["search"]["indices"] == [surface.alias]
    alice_paths = [" > ".join(h["title_path"] or []) for h in alice["search"]["hits"]]
    bob_paths = [" > ".join(h["title_path"] or []) for h in bob["search"]["hits"]]
    assert any("Merger" in p for p in alice_paths), alice_paths
    assert not any("Merger" in p for p in bob_paths), bob_paths
    facet = {b["key"]: b["doc_count"] for b in alice["search"]["buckets"]}
    bob_facet = {b["key"]: b["doc_count"] for b in bob["search"]["buckets"]}
    assert facet[surface.finance] > bob_facet.get(surface.finance, 0)
    assert [r["status"] for r in alice["msearch"]["responses"]] == [200, 200]
    assert alice["count"]["all"] == bob["count"]["all"] + 1
    assert alice["mapping"]["keys"] == [surface.alias]
    assert "title.keyword" in alice["field_caps"]["fields"]
    assert alice["bad_request"]["statusCode"] == 404
    assert alice["bad_request"]["type"] == "index_not_found_exception"


def test_search_ui_driver(surface: Surface) -> None:
    runs = {}
    for who in ("alice", "bob"):
        runs[who] = _node(
            "driver.mjs",
            *("--url", surface.url, "--key", surface.keys[who], "--index", surface.alias),
            *("--query", "merger expense budget", "--facet", surface.facet),
        )
    alice, bob = runs["alice"], runs["bob"]
    assert alice["totalResults"] == len(alice["results"]) > 0
    assert all(r["title_path"] for r in alice["results"]), alice["results"]
    assert any("Merger" in str(r["title_path"]) for r in alice["results"]), alice["results"]
    assert not any("Merger" in str(r["title_path"]) for r in bob["results"])
    assert not any("bluebird" in json.dumps(r).lower() for r in bob["results"])
    counts = {f["value"]: f["count"] for f in alice["facets"][surface.facet]}
    bob_counts = {f["value"]: f["count"] for f in bob["facets"][surface.facet]}
    assert counts[surface.finance] == bob_counts[surface.finance] + 1
    # a facet value selected: Search UI sends it as a post_filter; the hits narrow, the
    # facet counts stay
    narrowed = _node(
        "driver.mjs",
        *("--url", surface.url, "--key", surface.keys["alice"], "--index", surface.alias),
        *("--query", "merger expense budget", "--facet", surface.facet),
        *("--filter", f"{surface.facet}={surface.finance}"),
    )
    assert narrowed["results"] and narrowed["totalResults"] == counts[surface.finance]
    assert {f["value"] for f in narrowed["facets"][surface.facet]} >= {surface.finance}


def test_search_ui_page_in_chromium(surface: Surface) -> None:
    """The demo page, built with esbuild, served from another origin than the service,
    rendered by headless Chromium: results with their title paths, a facet with counts,
    and the restricted document visible to alice only."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    port = surface.origin.rsplit(":", 1)[1]
    pages = {}
    for who in ("alice", "bob"):
        shot = ARTIFACTS / f"search-ui-{surface.engine}-{who}.png"
        pages[who] = _node(
            "browser.mjs",
            *("--url", surface.url, "--key", surface.keys[who], "--index", surface.alias),
            *("--query", "merger expense budget", "--facet", surface.facet),
            *("--screenshot", str(shot), "--page-port", port, "--timeout", "60"),
            timeout=240,
        )
        assert shot.stat().st_size > 10_000
        assert not pages[who]["failed_requests"], pages[who]["failed_requests"]
    alice, bob = pages["alice"], pages["bob"]
    assert all(r["title_path"] for r in alice["results"]), alice["results"]
    assert any("Merger" in r["title_path"] for r in alice["results"])
    assert not any("Merger" in r["title_path"] for r in bob["results"])
    assert "bluebird" not in json.dumps(bob).lower()

    def facet(page: dict[str, Any]) -> dict[str, int]:
        (rendered,) = [f for f in page["facets"] if f["field"] == surface.facet]
        return {v["value"]: int(v["count"]) for v in rendered["values"]}

    assert facet(alice)[surface.finance] == facet(bob)[surface.finance] + 1
    assert "out of" in alice["paging_info"]


# --- fuzzing: no body may produce a 5xx -----------------------------------------------------
_WORDS = [
    "query", "bool", "must", "should", "filter", "must_not", "match", "multi_match",
    "match_all", "term", "terms", "range", "exists", "ids", "values", "gte", "lt", "field",
    "fields", "aggs", "filters", "cardinality", "date_histogram", "calendar_interval",
    "post_filter", "sort", "order", "size", "from", "_source", "highlight", "explain",
    "track_total_hits", "query_string", "knn", "script", "doc_id", "title", "title.keyword",
    "content", "metadata.department", "updated_at", "page_start", "tenant_id", "embedding",
    "merger", "asc", "desc",
]  # fmt: skip


def _dsl() -> Any:
    from hypothesis import strategies as st

    scalars = st.one_of(
        st.sampled_from(_WORDS), st.integers(-5, 60), st.booleans(), st.none(),
        st.text(max_size=12), st.floats(allow_nan=False, allow_infinity=False),
    )  # fmt: skip
    return st.recursive(
        scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3),
            st.dictionaries(st.sampled_from(_WORDS), inner, max_size=3),
        ),
        max_leaves=12,
    )


def test_fuzz_search_bodies_no_5xx(surface: Surface) -> None:
    """Random query DSL (and non-DSL) at _search, _count and _msearch: refused or answered,
    never a server error."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    seen: dict[int, int] = {}
    headers = {"Authorization": f"ApiKey {surface.keys['alice']}"}
    http = surface.served.http

    @settings(max_examples=150, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(body=st.dictionaries(st.sampled_from(_WORDS), _dsl(), max_size=4),
           route=st.sampled_from(["_search", "_count", "_msearch"]))  # fmt: skip
    def run(body: dict[str, Any], route: str) -> None:
        path = f"/{surface.alias}/{route}"
        if route == "_msearch":
            raw = json.dumps({}) + "\n" + json.dumps(body) + "\n"
            answer = http.post(path, content=raw, headers=headers)
        else:
            answer = http.post(path, json=body, headers=headers)
        assert answer.status_code < 500, (route, body, answer.text)
        assert answer.headers["x-elastic-product"] == "Elasticsearch"
        seen[answer.status_code] = seen.get(answer.status_code, 0) + 1

    run()
    assert seen.get(200, 0) >= 5 and seen.get(400, 0) >= 20, seen


# --- the leak count -------------------------------------------------------------------------
def test_canaries_never_leak_through_the_surface(
    surface: Surface, engine: Engine, embedder: Any, analyzer: Any
) -> None:
    """Two more tenants' canary documents in the same alias, every ACL shape; every probe
    of every caller through _search, _msearch, _count and aggregations
    (scripts/es_surface_canaries.py)."""
    docs = canaries.canaries()
    settings = surface.settings
    canaries.ingest(Ingestor(settings, client=engine, embedder=embedder, analyzer=analyzer), docs)
    rows = canaries.row_counts(engine, surface.alias, docs)
    assert all(rows.values()), rows
    store = KeyStore(engine, f"{surface.alias}-keys", cache_seconds=0)
    leaks = canaries.Leaks()
    http = surface.served.http
    for tenant, people in canaries.callers():
        key = store.create(tenant=tenant, principals=[f"user:{p}" for p in people]).encoded
        headers = {"Authorization": f"ApiKey {key}"}

        def call(method: str, path: str, body: Any, headers: dict[str, str] = headers) -> Any:
            if isinstance(body, list):
                raw = "".join(json.dumps(line) + "\n" for line in body)
                answer = http.request(
                    method,
                    path,
                    content=raw,
                    headers={**headers, "content-type": "application/x-ndjson"},
                )
            else:
                answer = http.request(method, path, json=body, headers=headers)
            assert answer.status_code == 200, (path, answer.text)
            return answer.json()

        canaries.check(call, surface.alias, tenant, people, docs, rows, leaks)
    assert leaks.probes >= 8 * 17
    assert leaks.found == []


# --- the golden bodies ------------------------------------------------------------------------
def _client_name(user_agent: str | None) -> str:
    agent = (user_agent or "").lower()
    for prefix, name in (("elasticsearch-py/", "python"), ("elasticsearch-js/", "js")):
        if agent.startswith(prefix):
            return f"{name}-{agent[len(prefix)]}"
    return "search-ui-browser" if "chrome" in agent else "search-ui-node"


def test_golden_bodies_are_what_the_clients_sent(surface: Surface) -> None:
    """Runs last in the module: every ``_search`` body a client sent above must be a golden
    body (tests/unit/test_dsl.py checks its plan). ``ES_RAG_RECORD_BODIES=1`` writes them."""
    types = field_types(
        json.loads((ROOT / "mappings/elasticsearch-chunks-v1.json").read_text())["mappings"][
            "properties"
        ]
    )
    known = [json.loads(p.read_text()) for p in GOLDEN.glob("*.json")]
    sent = surface.recorder.searches()
    assert sent, "no client sent a _search body through the recorder"
    missing = []
    for r in sent:
        _, _, query = r["path"].partition("?")
        params = dict(httpx.QueryParams(query))
        case = {"client": _client_name(r["user_agent"]), "params": params, "request": r["body"]}
        if not any(k["request"] == r["body"] and k["params"] == params for k in known):
            missing.append(case)
    if os.environ.get("ES_RAG_RECORD_BODIES") == "1":
        GOLDEN.mkdir(parents=True, exist_ok=True)
        for case in missing:
            digest = hashlib.sha1(json.dumps(case, sort_keys=True).encode()).hexdigest()[:8]
            case["translated"] = parse_search(case["request"], types, case["params"]).to_dict()
            name = GOLDEN / f"{case['client']}-{digest}.json"
            name.write_text(json.dumps(case, indent=2, ensure_ascii=False) + "\n")
        known += missing
        missing = []
    assert not missing, (
        f"{len(missing)} body(ies) sent by the clients are not golden bodies yet (a client "
        "changed what it sends?): review them and record with ES_RAG_RECORD_BODIES=1: "
        + json.dumps(missing)[:3000]
    )
