from __future__ import annotations

import json

import pytest

from es_rag.config import Settings
from es_rag.engine.mapping import (
    IndexContract,
    build_index_body,
    load_mapping_template,
    mappings_dir,
)
from es_rag.errors import ConfigurationError

pytestmark = pytest.mark.unit

CONTRACT = IndexContract(
    embedding_model="m",
    embedding_version="st:m@abc:384",
    dims=384,
    similarity="cosine",
    analyzer_version="esrag-1",
    chunker_version="c1",
    parser_version="p1",
)


def test_template_has_the_design_fields() -> None:
    props = load_mapping_template()["mappings"]["properties"]
    for name in [
        "chunk_id",
        "doc_id",
        "doc_version",
        "chunk_type",
        "parent_id",
        "ordinal",
        "title",
        "title_path",
        "content",
        "context_header",
        "content_terms",
        "title_terms",
        "embedding",
        "source_uri",
        "mime_type",
        "page_start",
        "page_end",
        "element_types",
        "language",
        "content_hash",
        "doc_hash",
        "parser_version",
        "chunker_version",
        "embedding_model",
        "embedding_version",
        "updated_at",
        "indexed_at",
        "tenant_id",
        "visibility",
        "allowed_principals",
        "denied_principals",
        "metadata",
    ]:
        assert name in props, name
    assert props["content_terms"]["analyzer"] == "whitespace"
    assert props["content"]["analyzer"] == "standard"
    assert props["allowed_principals"]["type"] == "keyword"


def test_loader_fills_placeholders_from_settings() -> None:
    settings = Settings(
        vector_index_type="int8_hnsw",
        hnsw_m=24,
        hnsw_ef_construction=200,
        number_of_shards=2,
        similarity="dot_product",
    )
    contract = IndexContract(**{**CONTRACT.__dict__, "similarity": "dot_product"})
    body = build_index_body(settings, contract)
    vector = body["mappings"]["properties"]["embedding"]
    assert vector == {
        "type": "dense_vector",
        "dims": 384,
        "index": True,
        "similarity": "dot_product",
        "index_options": {"type": "int8_hnsw", "m": 24, "ef_construction": 200},
    }
    assert body["settings"]["index"]["number_of_shards"] == 2
    meta = body["mappings"]["_meta"]
    assert meta["embedding_version"] == "st:m@abc:384"
    assert meta["analyzer_version"] == "esrag-1"
    assert meta["mapping_version"] == 1
    assert "<" not in json.dumps(body)


def test_flat_index_has_no_hnsw_options() -> None:
    body = build_index_body(Settings(vector_index_type="flat"), CONTRACT)
    assert body["mappings"]["properties"]["embedding"]["index_options"] == {"type": "flat"}


def test_bad_settings_are_errors() -> None:
    with pytest.raises(ConfigurationError):
        build_index_body(Settings(vector_index_type="nope"), CONTRACT)
    with pytest.raises(ConfigurationError, match="normalised"):
        build_index_body(
            Settings(embedding_normalize=False),
            IndexContract(**{**CONTRACT.__dict__, "similarity": "dot_product"}),
        )


def test_contract_roundtrip_and_differences() -> None:
    meta = CONTRACT.to_meta()
    assert IndexContract.from_meta(meta) == CONTRACT
    assert IndexContract.from_meta({"embedding_model": "x"}) is None
    other = IndexContract(**{**CONTRACT.__dict__, "dims": 768})
    assert CONTRACT.differences(other, keys=("dims", "analyzer_version")) == [
        "dims: index has 384, configuration has 768"
    ]


def test_mappings_dir_is_the_repo_folder() -> None:
    assert (mappings_dir() / "elasticsearch-chunks-v1.json").is_file()


def test_an_index_from_before_tenant_ids_reads_as_id_version_1() -> None:
    """Indexes written before ids carried the tenant have no id_version or identity in
    _meta: they read as version 1 with identities kept exactly, so writers refuse them."""
    old = {k: v for k, v in CONTRACT.to_meta().items() if k not in ("id_version", "identity")}
    contract = IndexContract.from_meta(old)
    assert contract is not None
    assert (contract.id_version, contract.identity) == (1, "exact")
    assert (CONTRACT.id_version, CONTRACT.identity) == (2, "nfc-casefold")


def test_chunk_ids_belong_to_a_tenant() -> None:
    from es_rag.pipeline import chunk_id

    a = chunk_id("acme", "handbook.md", "v1", "child", 0)
    assert a == chunk_id("acme", "handbook.md", "v1", "child", 0)  # deterministic
    assert a != chunk_id("globex", "handbook.md", "v1", "child", 0)
    # Parts are encoded, not joined: no two (doc id, version) pairs share an id.
    assert chunk_id("a", "b\x00c", "v", "child", 0) != chunk_id("a", "b", "c\x00v", "child", 0)
    assert chunk_id("a", "b:c", "v", "child", 0) != chunk_id("a:b", "c", "v", "child", 0)
