"""OpenSearch behind the ``opensearch-py`` client.

Differences from Elasticsearch that matter to es-rag, each handled here or in
``query/build.py``: vectors are the k-NN plugin's ``knn_vector`` (with an explicit engine,
see ``mapping.opensearch_knn_method``), the kNN search is a query clause whose ``filter``
is applied during the graph walk, there is no ``rrf`` retriever (fusion is the hybrid query
with a ``score-ranker-processor`` search pipeline, from the neural-search plugin, or
client-side), and there is no license API.
"""

from __future__ import annotations

import copy
from typing import Any

import orjson
from opensearchpy import OpenSearch
from opensearchpy import exceptions as os_exc
from opensearchpy.serializer import JSONSerializer

from es_rag.config import Settings
from es_rag.engine.base import (
    NODE_FILTER,
    ClusterInfo,
    Engine,
    check_msearch_items,
    check_shards,
    error_reason,
)
from es_rag.engine.mapping import OPENSEARCH_KNN_ENGINES
from es_rag.errors import ConfigurationError
from es_rag.query import build

KNN_PLUGIN = "opensearch-knn"
NEURAL_PLUGIN = "opensearch-neural-search"
# score-ranker-processor (RRF) and the hybrid query's pagination_depth arrived in 2.19.
HYBRID_RRF_SINCE = (2, 19)
# Engines the k-NN plugin serves without native code. faiss and nmslib are JNI libraries the
# plugin zip may not carry, and nothing in the REST API says whether they load: loading a
# missing one kills the node. So es-rag only creates them where the operator vouches for
# them (ES_RAG_OPENSEARCH_NATIVE_KNN, see ``knn_engines``).
JAVA_KNN_ENGINES = ("lucene",)


class OrjsonSerializer(JSONSerializer):
    """orjson for bodies, as for Elasticsearch (es_rag.engine.elastic.OrjsonSerializer)."""

    def dumps(self, data: Any) -> Any:
        if isinstance(data, (str, bytes)):
            return data
        try:
            return orjson.dumps(data, default=self.default, option=_ORJSON_OPTIONS).decode()
        except TypeError as exc:
            raise os_exc.SerializationError(data, exc) from exc

    def loads(self, s: str) -> Any:
        try:
            return orjson.loads(s)
        except orjson.JSONDecodeError as exc:
            raise os_exc.SerializationError(s, exc) from exc


_ORJSON_OPTIONS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS


def make_opensearch_client(settings: Settings) -> OpenSearch:
    """An OpenSearch client from settings; creating it does no I/O."""
    if settings.es_api_key is not None:
        raise ConfigurationError(
            "OpenSearch has no Elasticsearch API keys; set ES_RAG_ES_USERNAME and "
            "ES_RAG_ES_PASSWORD instead of ES_RAG_ES_API_KEY"
        )
    kwargs: dict[str, Any] = {
        "timeout": settings.es_request_timeout,
        "retry_on_timeout": True,
        "max_retries": 3,
        "pool_maxsize": settings.es_connections_per_node,
        "serializer": OrjsonSerializer(),
    }
    if settings.es_username:
        password = settings.es_password.get_secret_value() if settings.es_password else ""
        kwargs["http_auth"] = (settings.es_username, password)
    if settings.es_ca_certs is not None:
        kwargs["ca_certs"] = str(settings.es_ca_certs)
    if settings.es_url.startswith("https"):
        kwargs["use_ssl"] = True
        kwargs["verify_certs"] = settings.es_verify_certs
        kwargs["ssl_show_warn"] = settings.es_verify_certs
    return OpenSearch(hosts=settings.es_urls, **kwargs)


class OpenSearchEngine(Engine):
    flavor = "opensearch"
    helpers_module = "opensearchpy.helpers"
    not_found = os_exc.NotFoundError
    client: OpenSearch

    @staticmethod
    def body(resp: Any) -> Any:
        return resp

    def __init__(self, client: OpenSearch, *, native_knn: bool = False) -> None:
        super().__init__(client)
        self.native_knn = native_knn
        self._info: ClusterInfo | None = None

    timeout_errors = (os_exc.ConnectionTimeout,)
    connection_errors = (os_exc.ConnectionError,)
    api_errors = (os_exc.TransportError,)

    @staticmethod
    def status_and_reason(exc: Exception) -> tuple[int | None, str]:
        assert isinstance(exc, os_exc.TransportError)
        status = exc.status_code if isinstance(exc.status_code, int) else None
        return status, error_reason(exc.info, str(exc.error))

    # --- reads ---------------------------------------------------------------------------
    def search(
        self, index: str, body: dict[str, Any], *, params: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        resp = self.call(
            "search", lambda: self.client.search(index=index, body=body, params=params or {})
        )
        return check_shards(dict(resp), "search")

    def msearch(self, searches: list[dict[str, Any]]) -> list[dict[str, Any]]:
        resp = self.call("msearch", lambda: self.client.msearch(body=searches))
        return check_msearch_items(list(resp["responses"]))

    def count(self, index: str, query: dict[str, Any]) -> int:
        resp = self.call("count", lambda: self.client.count(index=index, body={"query": query}))
        return int(resp["count"])

    # --- indices and aliases -------------------------------------------------------------
    def index_exists(self, name: str) -> bool:
        return bool(self.call("check name", lambda: self.client.indices.exists(index=name)))

    def list_indices(self, pattern: str) -> list[str]:
        resp = self.call(
            "list indices",
            lambda: self.client.indices.get(index=pattern, params={"allow_no_indices": "true"}),
        )
        return sorted(resp)

    def create_index(self, name: str, body: dict[str, Any]) -> None:
        """Create ``name`` after checking its vector engines against the cluster (faiss guard)."""
        self.check_knn_engines(body)
        body = self._with_stored_vectors(body)
        self.call(f"create index {name}", lambda: self.client.indices.create(index=name, body=body))

    def _with_stored_vectors(self, body: dict[str, Any]) -> dict[str, Any]:
        """Keep vectors in ``_source`` (k-NN's "derived source" off) on OpenSearch 3.x.

        3.x derives a vector's ``_source`` from the vector index by default. On 3.5 a
        partial update of such a row (es-rag's access-only path: an ACL or metadata
        change) fails for every row of a segment held in a compound file, with
        ``already_closed_exception: Already closed: MemorySegmentIndexInput(...cfs)``
        (reproduced: 40-section documents fail, 3-section ones pass). Stored vectors cost
        disk but keep updates working. 2.x stores them anyway and lacks the setting.
        """
        if not _knn_engines_in(body.get("mappings", {}).get("properties", {})):
            return body
        version = self.probe_once().version_tuple
        if version < (3,):
            return body
        body = copy.deepcopy(body)
        index_settings = body.setdefault("settings", {}).setdefault("index", {})
        index_settings["knn.derived_source.enabled"] = False
        return body

    def delete_index(self, name: str) -> None:
        self.call(
            f"delete index {name}",
            lambda: self.client.indices.delete(index=name, params={"ignore_unavailable": "true"}),
        )

    def index_settings(self, index: str) -> dict[str, Any]:
        resp = self.call(
            "read index settings",
            lambda: self.client.indices.get_settings(
                index=index, params={"filter_path": "*.settings.index.blocks"}
            ),
        )
        return {name: v.get("settings", {}).get("index", {}) for name, v in resp.items()}

    def _index_one(
        self, index: str, doc_id: str, body: dict[str, Any], params: dict[str, Any]
    ) -> None:
        self.client.index(index=index, id=doc_id, body=body, params=params)

    def _is_conflict(self, exc: Exception) -> bool:
        return isinstance(exc, os_exc.ConflictError)

    def check_knn_engines(self, body: dict[str, Any]) -> None:
        """Refuse, before anything is written, a vector field this cluster cannot serve."""
        wanted = _knn_engines_in(body.get("mappings", {}).get("properties", {}))
        if not wanted:
            return
        info = self.probe_once()
        for path, engine in wanted:
            if engine not in info.knn_engines:
                served = ", ".join(info.knn_engines) or "none (no k-NN plugin)"
                why = (
                    f"the {KNN_PLUGIN} plugin is not installed"
                    if KNN_PLUGIN not in info.plugins
                    else f"{engine} is a native library that es-rag cannot verify on this "
                    "cluster (a missing one kills the node at the first refresh); set "
                    "ES_RAG_OPENSEARCH_NATIVE_KNN=true if every data node has it"
                )
                raise ConfigurationError(
                    f"refusing to create an index whose {path} uses the k-NN engine "
                    f"{engine!r}: {why}. Engines this cluster serves: {served}. Nothing was "
                    "written; set ES_RAG_OPENSEARCH_KNN_ENGINE=lucene"
                )

    # --- search pipelines (opensearch-hybrid) -------------------------------------------
    def ensure_search_pipeline(self, name: str, body: dict[str, Any]) -> bool:
        """Create or update pipeline ``name`` to ``body``; True when it was written."""
        path = f"/_search/pipeline/{name}"
        with self.errors(f"read search pipeline {name}"):
            try:
                current = self.client.transport.perform_request("GET", path)
            except os_exc.NotFoundError:
                current = {}
        if isinstance(current, dict) and _same_pipeline(current.get(name), body):
            return False
        self.call(
            f"put search pipeline {name}",
            lambda: self.client.transport.perform_request("PUT", path, body=body),
        )
        return True

    # --- request shapes ------------------------------------------------------------------
    knn_body = staticmethod(build.opensearch_knn_body)

    # --- cluster -------------------------------------------------------------------------
    def probe_once(self) -> ClusterInfo:
        if self._info is None:
            self._info = self.probe("")
        return self._info

    def _local_node_info(self) -> Any:
        return self.client.nodes.info(
            node_id="_local", metric="plugins", params={"filter_path": NODE_FILTER}
        )

    def probe(self, index: str) -> ClusterInfo:
        version, plugins = self.node()
        hybrid, hybrid_reason = hybrid_support(version, plugins)
        info = ClusterInfo(
            flavor=self.flavor,
            version=version,
            license_type=None,
            native_rrf=False,
            native_rrf_reason="the rrf retriever is Elasticsearch's; OpenSearch fuses with "
            "opensearch-hybrid (neural-search plugin) or client-rrf",
            plugins=plugins,
            hybrid=hybrid,
            hybrid_reason=hybrid_reason,
            knn_engines=self.knn_engines(plugins),
        )
        self._info = info
        return info

    def knn_engines(self, plugins: tuple[str, ...]) -> tuple[str, ...]:
        if KNN_PLUGIN not in plugins:
            return ()
        if self.native_knn:
            return OPENSEARCH_KNN_ENGINES
        return JAVA_KNN_ENGINES


def hybrid_support(version: str, plugins: tuple[str, ...]) -> tuple[bool, str]:
    """(whether opensearch-hybrid runs, why not): neural-search and RRF pipelines (2.19+)."""
    if NEURAL_PLUGIN not in plugins:
        return False, f"the {NEURAL_PLUGIN} plugin is not installed"
    numbers = tuple(int(p) for p in version.split("-")[0].split(".")[:2] if p.isdigit())
    if numbers < HYBRID_RRF_SINCE:
        return False, f"RRF in a search pipeline needs OpenSearch 2.19+ (this is {version})"
    return True, ""


def _knn_engines_in(props: dict[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    """(field path, engine) of every ``knn_vector``; no method means 3.x's default, faiss."""
    out = []
    for name, spec in props.items():
        if not isinstance(spec, dict):
            continue
        path = f"{prefix}{name}"
        if spec.get("type") == "knn_vector":
            method = spec.get("method") or {}
            out.append((path, str(method.get("engine") or "faiss")))
        out.extend(_knn_engines_in(spec.get("properties") or {}, f"{path}."))
    return out


def _same_pipeline(current: Any, wanted: dict[str, Any]) -> bool:
    if not isinstance(current, dict):
        return False
    return all(current.get(key) == value for key, value in wanted.items())
