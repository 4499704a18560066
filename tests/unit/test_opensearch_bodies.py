"""OpenSearch request bodies have the shapes OpenSearch's documentation gives.

The fixtures in tests/fixtures/opensearch-docs are examples taken from OpenSearch's
documentation (the page is named in each file's ``_doc_page``). The hybrid query and the
RRF pipeline cannot run on the test server (no neural-search plugin), so these shape
checks are what holds them to the documented API; the kNN query and the mapping also run
on the real server in the integration suite.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from es_rag.acl import acl_filter, make_caller
from es_rag.config import Settings
from es_rag.engine.mapping import IndexContract, build_index_body
from es_rag.errors import ConfigurationError
from es_rag.query import build
from es_rag.query.guard import problems

pytestmark = pytest.mark.unit

DOCS = Path(__file__).parents[1] / "fixtures" / "opensearch-docs"
ACL = acl_filter(make_caller("acme", users=["u1"]))
VECTOR = [0.5, -0.25]
CONTRACT = IndexContract(
    embedding_model="m",
    embedding_version="st:m@abc:2",
    dims=2,
    similarity="cosine",
    analyzer_version="esrag-1",
    chunker_version="c1",
    parser_version="p1",
)


def doc(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DOCS / f"{name}.json").read_text())
    data.pop("_doc_page")
    return data


def shape(node: Any, *, rename: dict[str, str] | None = None) -> Any:
    """Keys and value types, recursively; field names (user data) renamed to a placeholder."""
    rename = rename or {}
    if isinstance(node, dict):
        return {rename.get(k, k): shape(v, rename=rename) for k, v in node.items()}
    if isinstance(node, list):
        return "list"
    return "number" if isinstance(node, int | float) and not isinstance(node, bool) else "str"


def only(keys: set[str], node: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in node.items() if k in keys}


def test_knn_query_is_the_documented_efficient_filter_shape() -> None:
    ours = build.opensearch_knn_body(VECTOR, acl=ACL, size=3, num_candidates=100)
    knn = ours["query"]["knn"]["embedding"]
    documented = doc("knn-efficient-filter")["query"]["knn"]["location"]
    # vector, k and a single bool filter query, as documented for efficient filtering
    assert shape(only({"vector", "k"}, knn)) == shape(only({"vector", "k"}, documented))
    assert set(knn["filter"]) == set(documented["filter"]) == {"bool"}
    assert knn["filter"]["bool"]["filter"][0] == ACL  # the caller's ACL, inside the k-NN filter
    assert knn["k"] == ours["size"] == 3
    documented_params = doc("knn-method-parameters")["query"]["knn"]["target-field"]
    assert shape(knn["method_parameters"]) == shape(documented_params["method_parameters"])
    assert knn["method_parameters"] == {"ef_search": 100}


def test_ef_search_is_never_below_k() -> None:
    body = build.opensearch_knn_body(VECTOR, acl=ACL, size=50, num_candidates=10)
    assert body["query"]["knn"]["embedding"]["method_parameters"] == {"ef_search": 50}


def test_hybrid_query_is_the_documented_shape_with_acl_in_every_clause() -> None:
    ours = build.opensearch_hybrid_body(
        build.bm25_query("refund polici", acl=ACL),
        VECTOR,
        acl=ACL,
        size=10,
        rank_window_size=50,
        num_candidates=100,
    )
    documented = doc("hybrid-query")
    assert set(ours["query"]["hybrid"]) == set(documented["query"]["hybrid"])
    clauses = ours["query"]["hybrid"]["queries"]
    assert [next(iter(c)) for c in clauses] == ["bool", "knn"]
    knn_doc = documented["query"]["hybrid"]["queries"][1]["knn"]["passage_embedding"]
    knn_ours = clauses[1]["knn"]["embedding"]
    assert shape(only({"vector", "k"}, knn_ours)) == shape(knn_doc)
    assert ours["query"]["hybrid"]["pagination_depth"] == knn_ours["k"] == 50
    assert ours["size"] == 10
    assert problems(ours, ACL) == []
    # a clause without the ACL is caught by the guard
    broken = json.loads(json.dumps(ours))
    broken["query"]["hybrid"]["queries"][1]["knn"]["embedding"]["filter"] = {"match_all": {}}
    assert problems(broken, ACL) == ["query lacks the ACL filter"]


def test_rrf_pipeline_equals_the_documented_example() -> None:
    documented = doc("score-ranker-pipeline")
    ours = build.opensearch_rrf_pipeline(rank_constant=40, bm25_weight=0.7, knn_weight=0.3)
    assert ours["phase_results_processors"] == documented["phase_results_processors"]


def test_rrf_pipeline_weights_are_normalised_and_equal_weights_omitted() -> None:
    weighted = build.opensearch_rrf_pipeline(rank_constant=60, bm25_weight=2.0, knn_weight=1.0)
    combination = weighted["phase_results_processors"][0]["score-ranker-processor"]["combination"]
    assert combination["parameters"]["weights"] == [pytest.approx(2 / 3), pytest.approx(1 / 3)]
    assert sum(combination["parameters"]["weights"]) == pytest.approx(1.0)
    plain = build.opensearch_rrf_pipeline(rank_constant=60)
    assert (
        "parameters"
        not in plain["phase_results_processors"][0]["score-ranker-processor"]["combination"]
    )


def test_pipeline_names_differ_per_fusion_setting() -> None:
    names = {
        build.opensearch_pipeline_name("p", rank_constant=60),
        build.opensearch_pipeline_name("p", rank_constant=20),
        build.opensearch_pipeline_name("p", rank_constant=60, bm25_weight=2.0),
    }
    assert len(names) == 3


def test_mapping_is_the_documented_lucene_knn_vector() -> None:
    settings = Settings(vector_index_type="hnsw", similarity="l2_norm")
    body = build_index_body(
        settings,
        IndexContract(**{**CONTRACT.__dict__, "similarity": "l2_norm"}),
        engine="opensearch",
    )
    documented = doc("knn-vector-lucene-mapping")
    assert body["settings"]["index"]["knn"] is True
    assert (
        body["mappings"]["properties"]["embedding"]
        == documented["mappings"]["properties"]["my_vector"]
    )
    assert body["mappings"]["properties"]["metadata"] == {"type": "flat_object"}
    assert body["mappings"]["_meta"]["dims"] == 2


def test_mapping_fields_equal_the_elasticsearch_mapping_but_for_vector_and_metadata() -> None:
    settings = Settings()
    es = build_index_body(settings, CONTRACT)["mappings"]["properties"]
    os_ = build_index_body(settings, CONTRACT, engine="opensearch")["mappings"]["properties"]
    assert set(es) == set(os_)
    assert {k for k in es if es[k] != os_[k]} == {"embedding", "metadata"}


@pytest.mark.parametrize(
    ("similarity", "space"),
    [("cosine", "cosinesimil"), ("dot_product", "innerproduct"), ("l2_norm", "l2")],
)
def test_space_type_follows_similarity(similarity: str, space: str) -> None:
    contract = IndexContract(**{**CONTRACT.__dict__, "similarity": similarity})
    body = build_index_body(Settings(), contract, engine="opensearch")
    method = body["mappings"]["properties"]["embedding"]["method"]
    assert method["space_type"] == space
    assert method["engine"] == "lucene"  # never left to the cluster's default (faiss in 3.x)
    assert method["parameters"]["encoder"] == {"name": "sq"}  # default int8_hnsw


def test_unsupported_vector_options_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="bbq_hnsw"):
        build_index_body(Settings(vector_index_type="bbq_hnsw"), CONTRACT, engine="opensearch")
    with pytest.raises(ConfigurationError, match="faiss"):
        build_index_body(Settings(opensearch_knn_engine="faiss"), CONTRACT, engine="opensearch")
    faiss = build_index_body(
        Settings(opensearch_knn_engine="faiss", vector_index_type="hnsw"),
        CONTRACT,
        engine="opensearch",
    )
    assert faiss["mappings"]["properties"]["embedding"]["method"]["engine"] == "faiss"
