"""es_rag.serve.es_api without a server: names, totals, explanations, error bodies."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from es_rag.serve.dsl import DslError
from es_rag.serve.es_api import (
    Compat,
    IndexNotFound,
    _total,
    check_params,
    es_error_body,
    explanation,
    index_not_found,
    parse_json,
    parse_ndjson,
)
from es_rag.serve.identity import Identity
from es_rag.types import Hit


def _who(aliases: tuple[str, ...] = ()) -> Identity:
    return Identity("k", "key", "acme", frozenset({"user:a"}), "search", aliases)


def _compat(alias: str = "es-rag") -> Compat:
    return Compat(SimpleNamespace(settings=SimpleNamespace(index=alias)))


@pytest.mark.parametrize("name", ["es-rag", "es-*", "*", "_all", "es-rag,es-rag", "*rag"])
def test_names_that_resolve_to_the_alias(name: str) -> None:
    assert _compat().resolve(name, _who()) == "es-rag"


@pytest.mark.parametrize(
    "name", ["other", "es-rag-2", "es-rag-mirror", "es-rag,other", "x*", "-es-rag", "ES-RAG"]
)
def test_other_names_are_not_found(name: str) -> None:
    with pytest.raises(IndexNotFound):
        _compat().resolve(name, _who())


def test_a_key_for_other_aliases_finds_nothing() -> None:
    with pytest.raises(IndexNotFound):
        _compat().resolve("es-rag", _who(("other",)))
    assert _compat().resolve("es-rag", _who(("es-rag",))) == "es-rag"


def test_totals() -> None:
    assert _total(7, 50, 10000) == {"total": {"value": 7, "relation": "eq"}}
    assert _total(50, 50, True) == {"total": {"value": 50, "relation": "gte"}}
    assert _total(30, 50, 10) == {"total": {"value": 10, "relation": "gte"}}
    assert _total(30, 50, False) == {}


def test_explanation_lists_each_retriever() -> None:
    hit = Hit(
        chunk_id="c",
        doc_id="d",
        source_uri=None,
        title_path=[],
        page_start=None,
        page_end=None,
        text="t",
        score=0.03,
        ranks={"bm25": 2, "knn": None},
        scores={"bm25": 7.5, "knn": None},
    )
    out = explanation(hit, "client-rrf")
    assert out["value"] == 0.03
    assert [d["description"] for d in out["details"]] == [
        "bm25: rank 2, score 7.5",
        "knn: not in its candidates",
    ]


def test_error_bodies_have_elasticsearchs_shape() -> None:
    body = es_error_body(400, "parsing_exception", "bad  thing")
    assert body == {
        "error": {
            "root_cause": [{"type": "parsing_exception", "reason": "bad thing"}],
            "type": "parsing_exception",
            "reason": "bad thing",
        },
        "status": 400,
    }
    missing = index_not_found("x")
    assert missing["status"] == 404 and missing["error"]["index"] == "x"


def test_params_and_bodies() -> None:
    check_params({"rerank": "true", "q": "x", "typed_keys": "false"})
    with pytest.raises(DslError, match="scroll"):
        check_params({"scroll": "1m"})
    with pytest.raises(DslError, match="typed_keys"):
        check_params({"typed_keys": "true"})
    assert parse_json(b"  ") is None
    with pytest.raises(DslError):
        parse_json(b"[1]")
    assert parse_ndjson(b'{}\n{"size": 1}\n\n') == [{}, {"size": 1}]
    with pytest.raises(DslError):
        parse_ndjson(b"{nope")
