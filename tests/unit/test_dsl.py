"""es_rag.serve.dsl: Elasticsearch request bodies to es-rag search plans, without a server.

The golden bodies (tests/fixtures/es_bodies/*.json) are requests that real clients sent in
the surface tests (tests/integration/test_es_surface.py records them through a proxy),
each with the plan es-rag must make of it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from es_rag.query.filters import field_types
from es_rag.serve.dsl import DslError, parse_count, parse_search, plain_text, source_spec

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = sorted((ROOT / "tests/fixtures/es_bodies").glob("*.json"))


def _types(engine: str) -> dict[str, str]:
    body = json.loads((ROOT / f"mappings/{engine}-chunks-v1.json").read_text())
    return field_types(body["mappings"]["properties"])


TYPES = _types("elasticsearch")


def test_there_are_golden_bodies() -> None:
    assert len(GOLDEN) >= 5


@pytest.mark.parametrize("path", GOLDEN, ids=[p.stem for p in GOLDEN])
@pytest.mark.parametrize("engine", ["elasticsearch", "opensearch"])
def test_golden_body_translates_to_its_plan(path: Path, engine: str) -> None:
    case = json.loads(path.read_text())
    plan = parse_search(case["request"], _types(engine), case.get("params"))
    assert plan.to_dict() == case["translated"]


def test_search_ui_text_is_asked_once() -> None:
    clause = {"multi_match": {"query": "vpn token", "fields": ["title^3", "content"]}}
    body = {
        "query": {
            "bool": {
                "must": [
                    {"bool": {"should": [clause, {**clause}, {"match_phrase": {"x": "vpn token"}}]}}
                ],
                "filter": [{"term": {"metadata.department": "eng"}}],
            }
        }
    }
    plan = parse_search(body, TYPES)
    assert plan.text == "vpn token"
    assert plan.filters == [{"term": {"metadata.department": "eng"}}]


def test_filters_in_must_and_must_not() -> None:
    body = {
        "query": {
            "bool": {
                "must": [{"match": {"content": "refund"}}, {"range": {"page_start": {"gte": 2}}}],
                "must_not": [{"exists": {"field": "page_end"}}, {"ids": {"values": ["x"]}}],
            }
        }
    }
    plan = parse_search(body, TYPES)
    assert plan.text == "refund"
    assert plan.filters == [
        {"range": {"page_start": {"gte": 2}}},
        {"bool": {"must_not": [{"exists": {"field": "page_end"}}, {"ids": {"values": ["x"]}}]}},
    ]


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ("title:vpn AND token", "vpn token"),
        ('"hardware token" -password', "hardware token"),
        ("vpn~2 token^3 NOT secret", "vpn token"),
        ("(refund OR expense) +receipt*", "refund expense receipt"),
        ("state-of-the-art !legacy", "state-of-the-art"),
    ],
)
def test_query_string_keeps_the_words(query: str, words: str) -> None:
    assert plain_text(query) == words
    for kind in ("query_string", "simple_query_string"):
        assert parse_search({"query": {kind: {"query": query}}}, TYPES).text == words


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"query": {"function_score": {"query": {"match_all": {}}}}}, "function_score"),
        ({"query": {"bool": {"filter": [{"match": {"content": "x"}}]}}}, "filter context"),
        ({"query": {"bool": {"should": [{"term": {"doc_id": "a"}}]}}}, "bool.filter"),
        ({"query": {"term": {"tenant_id": "other"}}}, "access control"),
        ({"query": {"term": {"allowed_principals": "user:x"}}}, "access control"),
        ({"query": {"term": {"content": "x"}}}, "analysed text"),
        ({"query": {"term": {"no_such_field": "x"}}}, "unknown field"),
        ({"query": {"terms": {"doc_id": {"index": "i", "id": "1", "path": "p"}}}}, "lookup"),
        ({"query": {"wildcard": {"doc_id": "a*"}}}, "wildcard"),
        ({"knn": {"field": "embedding"}}, "knn"),
        ({"suggest": {}}, "suggest"),
        ({"script_fields": {}}, "script_fields"),
        ({"unknown_key": 1}, "unknown_key"),
        ({"aggs": {"g": {"global": {}}}}, "global"),
        ({"aggs": {"s": {"significant_terms": {"field": "doc_id"}}}}, "significant_terms"),
        ({"aggs": {"t": {"terms": {"field": "doc_id", "min_doc_count": 0}}}}, "min_doc_count"),
        ({"aggs": {"t": {"terms": {"field": "tenant_id"}}}}, "access control"),
        ({"aggs": {"t": {"terms": {"field": "doc_id", "script": "x"}}}}, "scripts"),
        ({"aggs": {"t": {"terms": {"field": "content"}}}}, "analysed text"),
        ({"aggs": {"f": {"filter": {"term": {"visibility": "public"}}}}}, "access control"),
        ({"sort": [{"_script": {}}]}, "_script"),
        ({"sort": ["content"]}, "analysed text"),
        ({"highlight": {"fields": {"embedding": {}}}}, "embedding"),
        ({"highlight": {"fields": {"content": {"highlight_query": {}}}}}, "highlight_query"),
        ({"size": -1}, "size"),
        ({"from": "x"}, "from"),
    ],
)
def test_unsupported_requests_are_refused_by_name(body: dict[str, Any], named: str) -> None:
    with pytest.raises(DslError) as refused:
        parse_search(body, TYPES)
    assert named in str(refused.value)


def test_metadata_keys_filter_and_aggregate() -> None:
    body = {
        "query": {"match_all": {}},
        "post_filter": {"terms": {"metadata.department": ["hr"]}},
        "aggs": {
            "d": {
                "terms": {"field": "metadata.department"},
                "aggs": {"n": {"cardinality": {"field": "doc_id"}}},
            },
            "when": {"date_histogram": {"field": "updated_at", "calendar_interval": "month"}},
            "pages": {"range": {"field": "page_start", "ranges": [{"to": 5}, {"from": 5}]}},
            "f": {"filters": {"filters": {"hr": {"term": {"metadata.department": "hr"}}}}},
            "top": {"max": {"field": "page_end"}},
        },
    }
    plan = parse_search(body, TYPES)
    assert plan.text == "" and plan.aggs == body["aggs"]
    assert plan.post_filter == body["post_filter"]


def test_source_never_carries_the_vector_unless_named() -> None:
    assert source_spec(True) == {"excludes": ["embedding", "content_terms", "title_terms"]}
    assert source_spec(["doc_id", "title"])["includes"] == ["doc_id", "title"]
    assert "embedding" not in source_spec({"includes": ["embedding"]})["excludes"]
    assert source_spec(False) is False


def test_sort_on_score_alone_is_relevance() -> None:
    assert parse_search({"sort": ["_score"]}, TYPES).sort == []
    assert parse_search({"sort": [{"_score": "desc"}]}, TYPES).sort == []
    assert parse_search({"sort": [{"updated_at": "desc"}, "_score"]}, TYPES).sort == [
        {"updated_at": {"order": "desc"}},
        {"_score": {}},
    ]


def test_params_shape_the_plan_and_count_takes_a_query_only() -> None:
    plan = parse_search({}, TYPES, {"from": "5", "size": "7", "track_total_hits": "false"})
    assert (plan.from_, plan.size, plan.track_total_hits) == (5, 7, False)
    assert parse_count({"query": {"match": {"content": "vpn"}}}, TYPES).text == "vpn"
    with pytest.raises(DslError):
        parse_count({"query": {"match_all": {}}, "size": 3}, TYPES)


def test_uri_search_q_is_a_query_string() -> None:
    assert parse_search(None, TYPES, {"q": "title:vpn -secret"}).text == "vpn"
    with pytest.raises(DslError):
        parse_search({"query": {"match_all": {}}}, TYPES, {"q": "vpn"})


def test_metadata_keys_are_not_columns_on_opensearch() -> None:
    facet = {"aggs": {"d": {"terms": {"field": "metadata.department"}}}}
    types = _types("opensearch")
    assert parse_search(facet, types).aggs == facet["aggs"]
    with pytest.raises(DslError, match="flat_object"):
        parse_search(facet, types, metadata_columns=False)
    with pytest.raises(DslError, match="flat_object"):
        parse_search({"sort": ["metadata.department"]}, types, metadata_columns=False)
    # filters on metadata keys work on both engines
    flt = {"query": {"bool": {"filter": [{"term": {"metadata.department": "hr"}}]}}}
    assert parse_search(flt, types, metadata_columns=False).filters


def test_url_parameters_for_source_and_sort() -> None:
    plan = parse_search({"_source": True}, TYPES, {"_source_includes": "doc_id,title"})
    assert plan.source["includes"] == ["doc_id", "title"]
    assert parse_search({}, TYPES, {"_source": "false"}).source is False
    excluded = parse_search({}, TYPES, {"_source_excludes": "content"}).source
    assert "content" in excluded["excludes"] and "embedding" in excluded["excludes"]
    assert parse_search({}, TYPES, {"sort": "updated_at:desc,doc_id"}).sort == [
        {"updated_at": {"order": "desc"}},
        {"doc_id": {}},
    ]
