"""Pure loader for the versioned index mappings in ``mappings/``.

The JSON files are the public contract (Kibana and frontends read the field names); this
module only fills in what depends on settings (vector dimensions, similarity, HNSW and
quantisation options, shard counts) and the ``_meta`` block that records how the index was
built, so that a later writer or reader with a different model or analyzer is refused.
"""

from __future__ import annotations

import copy
import json
from dataclasses import asdict, dataclass, fields
from importlib import resources
from pathlib import Path
from typing import Any

from es_rag import __version__
from es_rag.config import Settings
from es_rag.errors import ConfigurationError

MAPPING_VERSION = 1
# How chunk ids are made. 1: sha256(doc id, version, type, ordinal); 2: the tenant first, so
# that two tenants' documents with the same id are two documents (DESIGN.md §5).
ID_VERSION = 2
_FLAT_TYPES = {"flat", "int8_flat", "int4_flat", "bbq_flat"}
_VECTOR_TYPES = _FLAT_TYPES | {"hnsw", "int8_hnsw", "int4_hnsw", "bbq_hnsw", "bbq_disk"}
# The settings that make an index's vectors and terms, recorded in its ``_meta`` as
# ``settings`` (es_rag.generations): whoever writes or queries a generation computes with
# them. Two recipes that agree on these make the same rows.
RECORDED_KEYS = (
    "embedding_backend",
    "embedding_model",
    "embedding_dims",
    "embedding_normalize",
    "embedding_max_length",
    "query_prefix",
    "passage_prefix",
    "embedding_input_type",
    "analyzer_language",
    "embedding_runtime",
)
# Recorded but never compared: how vectors are stored (a migration may change it and keep
# the model) and where a remote model answers (two hosts may reach one server by two names).
LOCATION_KEYS = ("similarity", "vector_index_type", "embedding_url")
# Keys recorded only since a later es-rag: what an index recorded without them was made with.
RECORDED_DEFAULTS: dict[str, Any] = {"embedding_runtime": "torch"}


def recorded_settings(settings: Settings) -> dict[str, Any]:
    """What an index created with ``settings`` records of them in its ``_meta``."""
    return {k: getattr(settings, k) for k in (*RECORDED_KEYS, *LOCATION_KEYS)}


def recorded_recipe(recorded: dict[str, Any]) -> dict[str, Any]:
    """The recorded keys of a ``_meta.settings``, with ``RECORDED_DEFAULTS`` for the keys
    an older es-rag did not record."""
    keys = (*RECORDED_KEYS, *LOCATION_KEYS)
    return {**RECORDED_DEFAULTS, **{k: recorded[k] for k in keys if k in recorded}}


@dataclass(frozen=True)
class IndexContract:
    """What an index was built with; stored in the mapping's ``_meta``.

    Writers and readers compare it with their own configuration: vectors from another
    model, or terms from another analyzer, would silently corrupt ranking.
    """

    embedding_model: str
    embedding_version: str
    dims: int
    similarity: str
    analyzer_version: str
    chunker_version: str
    parser_version: str
    mapping_version: int = MAPPING_VERSION
    id_version: int = ID_VERSION
    # The normal form of tenants and principals (es_rag.acl.identity_policy).
    identity: str = "nfc-casefold"

    def to_meta(self) -> dict[str, Any]:
        return {"es_rag_version": __version__, **asdict(self)}

    @classmethod
    def from_meta(cls, meta: dict[str, Any]) -> IndexContract | None:
        """The contract in ``_meta``; indexes written before ids and identity strings were
        versioned read as id version 1 with identities kept exactly as given."""
        meta = {"id_version": 1, "identity": "exact", **meta}
        names = {f.name for f in fields(cls)}
        if not names.issubset(meta):
            return None
        return cls(**{n: meta[n] for n in names})

    def differences(self, other: IndexContract, *, keys: tuple[str, ...]) -> list[str]:
        """Human-readable ``key: index=… config=…`` lines for the keys that differ."""
        out = []
        for key in keys:
            mine, theirs = getattr(self, key), getattr(other, key)
            if mine != theirs:
                out.append(f"{key}: index has {mine!r}, configuration has {theirs!r}")
        return out


def mappings_dir() -> Path:
    """The repo's ``mappings/`` in a checkout, the packaged copy in an installed wheel."""
    repo = Path(__file__).resolve().parents[2] / "mappings"
    if repo.is_dir():
        return repo
    # es_rag.mappings has no __init__: a namespace package, whose files() is a
    # MultiplexedPath (its str() is not a path); a file inside it is a real one.
    return Path(str(resources.files("es_rag.mappings").joinpath("status-v2.json"))).parent


def index_body(filename: str) -> dict[str, Any]:
    """The create body in one of ``mappings/``'s files (its own version and description,
    which are for people, left out)."""
    body: dict[str, Any] = json.loads((mappings_dir() / filename).read_text(encoding="utf-8"))
    body.pop("mapping_version", None)
    body.pop("description", None)
    return body


def load_mapping_template(engine: str = "elasticsearch", version: int = MAPPING_VERSION) -> dict:
    path = mappings_dir() / f"{engine}-chunks-v{version}.json"
    if not path.is_file():
        raise ConfigurationError(f"no mapping {path.name} in {path.parent}")
    data: dict = json.loads(path.read_text(encoding="utf-8"))
    return data


def vector_index_options(settings: Settings) -> dict[str, Any]:
    kind = settings.vector_index_type
    if kind not in _VECTOR_TYPES:
        raise ConfigurationError(
            f"unknown vector_index_type {kind!r}; expected one of {sorted(_VECTOR_TYPES)}"
        )
    options: dict[str, Any] = {"type": kind}
    if kind not in _FLAT_TYPES and kind != "bbq_disk":
        options["m"] = settings.hnsw_m
        options["ef_construction"] = settings.hnsw_ef_construction
    return options


# Elasticsearch similarity → OpenSearch k-NN space type with the same score for unit vectors.
OPENSEARCH_SPACE_TYPES = {
    "cosine": "cosinesimil",
    "dot_product": "innerproduct",
    "max_inner_product": "innerproduct",
    "l2_norm": "l2",
}
OPENSEARCH_KNN_ENGINES = ("lucene", "faiss", "nmslib")


def opensearch_knn_method(settings: Settings, similarity: str) -> dict[str, Any]:
    """The ``method`` of an OpenSearch ``knn_vector``, always explicit.

    Without a method OpenSearch 3.x picks faiss, a native library that a cluster may lack
    (then the node dies at the first refresh), so the engine is always written out: lucene
    by default, pure Java, served wherever the k-NN plugin runs. ``int8_hnsw`` maps to
    Lucene's scalar quantisation (the ``sq`` encoder), as on Elasticsearch.
    """
    engine = settings.opensearch_knn_engine
    if engine not in OPENSEARCH_KNN_ENGINES:
        raise ConfigurationError(
            f"unknown opensearch_knn_engine {engine!r}; expected one of {OPENSEARCH_KNN_ENGINES}"
        )
    kind = settings.vector_index_type
    if kind not in ("hnsw", "int8_hnsw") or (kind == "int8_hnsw" and engine != "lucene"):
        raise ConfigurationError(
            f"vector_index_type {kind!r} is not available with the OpenSearch {engine} engine; "
            "use hnsw (or int8_hnsw with the lucene engine)"
        )
    parameters: dict[str, Any] = {
        "m": settings.hnsw_m,
        "ef_construction": settings.hnsw_ef_construction,
    }
    if kind == "int8_hnsw":
        parameters["encoder"] = {"name": "sq"}
    return {
        "name": "hnsw",
        "engine": engine,
        "space_type": OPENSEARCH_SPACE_TYPES[similarity],
        "parameters": parameters,
    }


def build_index_body(
    settings: Settings, contract: IndexContract, *, engine: str = "elasticsearch"
) -> dict[str, Any]:
    """The ``indices.create`` body: the engine's template with every placeholder filled in."""
    if contract.similarity == "dot_product" and not settings.embedding_normalize:
        raise ConfigurationError("similarity dot_product needs normalised embeddings")
    template = load_mapping_template(engine, contract.mapping_version)
    body = {
        "settings": copy.deepcopy(template["settings"]),
        "mappings": copy.deepcopy(template["mappings"]),
    }
    body["settings"]["index"]["number_of_shards"] = settings.number_of_shards
    body["settings"]["index"]["number_of_replicas"] = settings.number_of_replicas
    vector = body["mappings"]["properties"]["embedding"]
    if engine == "opensearch":
        vector["dimension"] = contract.dims
        vector["method"] = opensearch_knn_method(settings, contract.similarity)
    else:
        vector["dims"] = contract.dims
        vector["similarity"] = contract.similarity
        vector["index_options"] = vector_index_options(settings)
    body["mappings"]["_meta"] = {**contract.to_meta(), "settings": recorded_settings(settings)}
    _check_filled(body)
    return body


def _check_filled(node: Any, path: str = "") -> None:
    """A placeholder left in the body is a bug in this module, not a user error."""
    if isinstance(node, dict):
        for key, value in node.items():
            _check_filled(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            _check_filled(value, f"{path}[{i}]")
    elif isinstance(node, str) and node.startswith("<") and node.endswith(">"):
        raise ConfigurationError(f"mapping placeholder {node} at {path} was not filled")
