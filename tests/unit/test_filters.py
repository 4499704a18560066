"""User filters: CLI syntax, the mapping's field types, and the type → clause table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from es_rag.errors import EsRagError, FilterError
from es_rag.query.build import bm25_query
from es_rag.query.filters import (
    ACCESS_FIELDS,
    FieldFilter,
    field_types,
    parse_filter,
    parse_filters,
    to_clauses,
)

pytestmark = pytest.mark.unit

MAPPING_FILE = Path(__file__).parents[2] / "mappings" / "elasticsearch-chunks-v1.json"
TYPES = field_types(json.loads(MAPPING_FILE.read_text())["mappings"]["properties"])


def clause(expr: str, types: dict[str, str] = TYPES) -> dict[str, Any]:
    [out] = to_clauses([parse_filter(expr)], types)
    return out


def refused(expr: str, types: dict[str, str] = TYPES) -> str:
    with pytest.raises(FilterError) as info:
        to_clauses(parse_filters([expr]), types)
    return str(info.value)


# --------------------------------------------------------------------------- parse_filter


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("doc_id=a", FieldFilter("doc_id", "eq", "a")),
        ("mime_type=a|b|c", FieldFilter("mime_type", "in", ("a", "b", "c"))),
        ("page_start>=3", FieldFilter("page_start", "gte", "3")),
        ("page_start>3", FieldFilter("page_start", "gt", "3")),
        ("page_start<=3", FieldFilter("page_start", "lte", "3")),
        ("page_start<3", FieldFilter("page_start", "lt", "3")),
        ("metadata.product?", FieldFilter("metadata.product", "exists")),
    ],
)
def test_parse_every_operator(expr: str, expected: FieldFilter) -> None:
    assert parse_filter(expr) == expected


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("  doc_id  =  a  ", FieldFilter("doc_id", "eq", "a")),
        ("page_start >= 3", FieldFilter("page_start", "gte", "3")),
        ("page_end\t<\t9", FieldFilter("page_end", "lt", "9")),
        ("mime_type = a | b | a", FieldFilter("mime_type", "in", ("a", "b"))),
        ("metadata.product ?", FieldFilter("metadata.product", "exists")),
    ],
)
def test_parse_whitespace_around_operators_and_members(expr: str, expected: FieldFilter) -> None:
    assert parse_filter(expr) == expected


def test_parse_value_keeps_equals_signs_and_inner_spaces() -> None:
    assert parse_filter("metadata.query=a=b") == FieldFilter("metadata.query", "eq", "a=b")
    assert parse_filter("metadata.q>=x=1") == FieldFilter("metadata.q", "gte", "x=1")
    assert parse_filter("title.keyword = Getting started ") == FieldFilter(
        "title.keyword", "eq", "Getting started"
    )
    assert parse_filter("metadata.note=why? because") == FieldFilter(
        "metadata.note", "eq", "why? because"
    )


def test_parse_double_pipe_is_date_math_not_a_set() -> None:
    assert parse_filter("updated_at>=2024-05-01||-1M") == FieldFilter(
        "updated_at", "gte", "2024-05-01||-1M"
    )


@pytest.mark.parametrize(
    ("expr", "fragment"),
    [
        ("", "empty filter"),
        ("   ", "empty filter"),
        ("doc_id", "no operator"),
        ("=a", "no field name"),
        ("?", "no field name"),
        ("doc_id=", "no value"),
        ("doc_id>=  ", "no value"),
        ("doc_id==a", "single operator"),
        ("page_start=>3", "did you mean '>='"),
        ("page_start=<3", "did you mean '<='"),
        ("doc_id!=a", "negation is not supported"),
        ("doc id=a", "not a field name"),
        ("metadata.=a", "not a field name"),
        ("metadata..x=a", "not a field name"),
        ("page_start>=1|2", "only allowed with '='"),
        ("mime_type=a||b|", "empty member"),
        ("mime_type=a| |b", "empty member"),
    ],
)
def test_parse_bad_syntax(expr: str, fragment: str) -> None:
    with pytest.raises(FilterError) as info:
        parse_filter(expr)
    assert fragment in str(info.value)


def test_syntax_errors_show_the_syntax() -> None:
    with pytest.raises(FilterError, match=r"field=v1\|v2"):
        parse_filter("doc_id")


def test_filter_error_is_an_es_rag_error() -> None:
    assert issubclass(FilterError, EsRagError)


def test_parse_filters_keeps_order_and_repeats_stay_and() -> None:
    filters = parse_filters(["element_types=table", "element_types=image", "page_start>=2"])
    assert filters == [
        FieldFilter("element_types", "eq", "table"),
        FieldFilter("element_types", "eq", "image"),
        FieldFilter("page_start", "gte", "2"),
    ]
    assert to_clauses(filters, TYPES) == [
        {"term": {"element_types": "table"}},
        {"term": {"element_types": "image"}},
        {"range": {"page_start": {"gte": 2}}},
    ]


def test_parse_filters_refuses_a_bare_string() -> None:
    with pytest.raises(TypeError):
        parse_filters("doc_id=a")


# --------------------------------------------------------------------------- field_types


def test_field_types_on_the_real_mapping() -> None:
    assert TYPES["doc_id"] == "keyword"
    assert TYPES["doc_version"] == "keyword"
    assert TYPES["page_start"] == "integer"
    assert TYPES["updated_at"] == "date"
    assert TYPES["content"] == "text"
    assert TYPES["title"] == "text"
    assert TYPES["title.keyword"] == "keyword"
    assert TYPES["title_path.keyword"] == "keyword"
    assert TYPES["metadata"] == "flattened"
    assert TYPES["embedding"] == "dense_vector"
    assert "content.keyword" not in TYPES


def test_field_types_walks_objects_and_skips_nested_children() -> None:
    props = {
        "a": {"properties": {"b": {"type": "long"}, "c": {"type": "object", "properties": {}}}},
        "n": {"type": "nested", "properties": {"x": {"type": "keyword"}}},
        "t": {"type": "text", "fields": {"raw": {"type": "keyword"}, "en": {"type": "text"}}},
    }
    assert field_types(props) == {
        "a": "object",
        "a.b": "long",
        "a.c": "object",
        "n": "nested",
        "t": "text",
        "t.raw": "keyword",
        "t.en": "text",
    }


# --------------------------------------------------------------------------- keyword family


def test_keyword_eq_in_exists() -> None:
    assert clause("doc_id=handbook-7") == {"term": {"doc_id": "handbook-7"}}
    assert clause("mime_type=application/pdf|text/html") == {
        "terms": {"mime_type": ["application/pdf", "text/html"]}
    }
    assert clause("parent_id?") == {"exists": {"field": "parent_id"}}
    assert clause("doc_version=10") == {"term": {"doc_version": "10"}}  # stays a string


def test_keyword_subfield_of_text_is_filterable() -> None:
    assert clause("title.keyword=Getting started") == {"term": {"title.keyword": "Getting started"}}


@pytest.mark.parametrize("expr", ["doc_version>=2", "doc_id<b", "title.keyword>a"])
def test_keyword_ranges_are_refused_as_lexicographic(expr: str) -> None:
    message = refused(expr)
    assert "compare as strings" in message
    assert "v1|v2" in message


def test_boolean_and_ip_and_constant_keyword() -> None:
    types = {"flag": "boolean", "addr": "ip", "kind": "constant_keyword"}
    assert clause("flag=TRUE", types) == {"term": {"flag": True}}
    assert clause("flag=false|true", types) == {"terms": {"flag": [False, True]}}
    assert "not true or false" in refused("flag=yes", types)
    assert clause("addr=10.0.0.0/8", types) == {"term": {"addr": "10.0.0.0/8"}}
    assert clause("addr=::1", types) == {"term": {"addr": "::1"}}
    assert "not an IP" in refused("addr=10.0.0.999", types)
    assert clause("kind=chunk", types) == {"term": {"kind": "chunk"}}
    assert "does not support 'gt'" in refused("flag>false", types)


# --------------------------------------------------------------------------- numeric family


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("page_start=3", {"term": {"page_start": 3}}),
        ("page_start=1|2|2", {"terms": {"page_start": [1, 2]}}),
        ("page_start>=10", {"range": {"page_start": {"gte": 10}}}),
        ("page_start>10", {"range": {"page_start": {"gt": 10}}}),
        ("page_end<=5", {"range": {"page_end": {"lte": 5}}}),
        ("page_end<5", {"range": {"page_end": {"lt": 5}}}),
        ("page_end=-2", {"term": {"page_end": -2}}),
        ("page_end=4.0", {"term": {"page_end": 4}}),
        ("ordinal?", {"exists": {"field": "ordinal"}}),
    ],
)
def test_integer_translators(expr: str, expected: dict[str, Any]) -> None:
    assert clause(expr) == expected


def test_integer_values_are_ints_and_exact() -> None:
    value = clause("big=9007199254740993", {"big": "long"})["term"]["big"]
    assert value == 9007199254740993
    assert isinstance(value, int)


def test_float_fields_take_fractions() -> None:
    types = {"score": "float", "price": "scaled_float"}
    assert clause("score>=0.5", types) == {"range": {"score": {"gte": 0.5}}}
    assert clause("price=3", types) == {"term": {"price": 3.0}}


@pytest.mark.parametrize(
    ("expr", "fragment"),
    [
        ("page_start=abc", "'abc' is not a number"),
        ("page_start>=ten", "'ten' is not a number"),
        ("page_start=1|x", "'x' is not a number"),
        ("page_start=1.5", "not a whole number"),
        ("page_start<nan", "not a finite number"),
        ("page_start<inf", "not a finite number"),
    ],
)
def test_bad_numbers(expr: str, fragment: str) -> None:
    assert fragment in refused(expr)


def test_programmatic_numbers_and_booleans() -> None:
    assert to_clauses([FieldFilter("page_start", "gte", 2)], TYPES) == [
        {"range": {"page_start": {"gte": 2}}}
    ]
    with pytest.raises(FilterError, match="not a number"):
        to_clauses([FieldFilter("page_start", "eq", True)], TYPES)


# --------------------------------------------------------------------------- date family


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("updated_at>=2024-05-01", {"range": {"updated_at": {"gte": "2024-05-01"}}}),
        (
            "updated_at>2024-05-01T10:00:00Z",
            {"range": {"updated_at": {"gt": "2024-05-01T10:00:00Z"}}},
        ),
        ("updated_at<=now", {"range": {"updated_at": {"lte": "now"}}}),
        ("updated_at<now-30d/d", {"range": {"updated_at": {"lt": "now-30d/d"}}}),
        ("indexed_at>=now-1h", {"range": {"indexed_at": {"gte": "now-1h"}}}),
        (
            "updated_at>=2024-05-01||-1M/M",
            {"range": {"updated_at": {"gte": "2024-05-01||-1M/M"}}},
        ),
        (
            "updated_at<2024-05-01T10:00:00.123+02:00",
            {"range": {"updated_at": {"lt": "2024-05-01T10:00:00.123+02:00"}}},
        ),
        ("updated_at?", {"exists": {"field": "updated_at"}}),
    ],
)
def test_date_ranges(expr: str, expected: dict[str, Any]) -> None:
    assert clause(expr) == expected


def test_date_equality_is_a_range_over_the_values_precision() -> None:
    day = "2024-05-01||/d"
    assert clause("updated_at=2024-05-01") == {"range": {"updated_at": {"gte": day, "lte": day}}}
    instant = "2024-05-01T10:00:00Z"
    assert clause(f"updated_at={instant}") == {
        "range": {"updated_at": {"gte": instant, "lte": instant}}
    }
    assert clause("updated_at=now/d") == {"range": {"updated_at": {"gte": "now/d", "lte": "now/d"}}}


@pytest.mark.parametrize(
    "value",
    [
        "yesterday",
        "2024-13-01",
        "2024-02-30",
        "2024-05-01 10:00",
        "2024-05-01T25:00",
        "2024/05/01",
        "1714521600000",
        "now-30x",
        "nowish",
        "now||-1d",
        "2024-05-01||",
        "2024-05-01||tomorrow",
    ],
)
def test_bad_dates(value: str) -> None:
    message = refused(f"updated_at>={value}")
    assert "is not a date" in message
    assert "ISO-8601" in message


def test_date_sets_are_refused() -> None:
    assert "use a range" in refused("updated_at=2024-05-01|2024-05-02")


# --------------------------------------------------------------------------- flattened metadata


def test_metadata_keys_have_keyword_semantics() -> None:
    assert clause("metadata.product=widget") == {"term": {"metadata.product": "widget"}}
    assert clause("metadata.version=2.0|2.1") == {"terms": {"metadata.version": ["2.0", "2.1"]}}
    assert clause("metadata.product?") == {"exists": {"field": "metadata.product"}}
    assert clause("metadata.a.b=c") == {"term": {"metadata.a.b": "c"}}
    assert clause("metadata.page=7") == {"term": {"metadata.page": "7"}}  # strings, as indexed


@pytest.mark.parametrize("expr", ["metadata.version>=1.9", "metadata.year<2020"])
def test_metadata_ranges_are_refused_as_lexicographic(expr: str) -> None:
    message = refused(expr)
    assert "a metadata key" in message
    assert "'1.10' < '1.9'" in message


def test_metadata_root_allows_only_exists() -> None:
    assert clause("metadata?") == {"exists": {"field": "metadata"}}
    assert "<field>.<key>=value" in refused("metadata=widget")


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("field", "keyword"),
    [
        ("title", "title.keyword"),
        ("title_path", "title_path.keyword"),
        ("content", None),
        ("context_header", None),
        ("content_terms", None),
        ("title_terms", None),
    ],
)
def test_text_fields_are_refused_with_a_keyword_hint(field: str, keyword: str | None) -> None:
    for expr in (f"{field}=x", f"{field}?"):
        message = refused(expr)
        assert f"{field} is an analysed text field" in message
        if keyword:
            assert f"filter on {keyword}" in message
        else:
            assert "filter on" not in message


@pytest.mark.parametrize("field", sorted(ACCESS_FIELDS))
def test_access_fields_are_reserved(field: str) -> None:
    for expr in (f"{field}=x", f"{field}?", f"{field}=a|b"):
        assert "reserved for access control" in refused(expr)


def test_access_fields_are_reserved_even_if_the_mapping_lacks_them() -> None:
    assert "reserved for access control" in refused("tenant_id=acme", {})
    assert "reserved for access control" in refused("allowed_principals.x=y", {})


def test_embedding_is_reserved() -> None:
    assert "reserved for vector search" in refused("embedding?")


def test_unknown_field_lists_valid_fields() -> None:
    message = refused("doc_idd=1")
    assert "unknown field 'doc_idd'" in message
    listed = message.split("valid fields include ", 1)[1]
    assert listed.startswith("doc_id")  # the closest match first
    assert "metadata.<key>" in listed
    for hidden in ("tenant_id", "embedding", "content"):
        assert hidden not in listed.split(", ")


def test_unknown_subfield_of_a_non_flattened_field() -> None:
    assert "unknown field 'doc_id.raw'" in refused("doc_id.raw=x")


def test_unfilterable_types_are_refused() -> None:
    assert "object field" in refused("a=1", {"a": "object"})
    assert "geo_point field" in refused("loc?", {"loc": "geo_point"})


@pytest.mark.parametrize(
    "bad",
    [
        FieldFilter("doc_id", "like", "a"),  # type: ignore[arg-type]
        FieldFilter("doc_id", "eq"),
        FieldFilter("doc_id", "in", "ab"),
        FieldFilter("doc_id", "in", ()),
        FieldFilter("doc_id", "exists", "x"),
        FieldFilter("doc_id", "eq", 1.5),
        FieldFilter("page_start", "gte", None),
    ],
)
def test_reserved_or_unknown_op_combinations(bad: FieldFilter) -> None:
    with pytest.raises(FilterError):
        to_clauses([bad], TYPES)


def test_clauses_drop_into_the_retrievers_after_the_acl() -> None:
    acl = {"term": {"tenant_id": "acme"}}
    filters = to_clauses(parse_filters(["doc_id=a", "page_start>=2"]), TYPES)
    body = bm25_query("x", acl=acl, filters=filters)
    assert body["bool"]["filter"][0] == acl
    assert body["bool"]["filter"][-2:] == filters
