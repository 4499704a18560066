"""The engine interface: everything es-rag asks of a search server, in one place.

Elasticsearch and OpenSearch share the request bodies es-rag needs for BM25, ``_msearch``,
bulk writes, scans and aliases, but not their clients (``elasticsearch`` refuses to talk to
OpenSearch, ``opensearch-py`` returns plain dicts and raises other exceptions), their
vector field types, their kNN query shapes or their fusion features. An ``Engine`` hides
the client: it takes and returns plain dicts and raises only es-rag's errors, so nothing
outside ``engine/`` and ``query/search.py`` knows which client is in use (DESIGN.md §3).
"""

from __future__ import annotations

import contextlib
import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, ClassVar, TypeVar

from es_rag.config import Settings
from es_rag.engine.mapping import IndexContract, build_index_body
from es_rag.errors import EngineError, EngineUnavailableError, StrategyUnavailableError

T = TypeVar("T")


@dataclass(frozen=True)
class ClusterInfo:
    """What the probe learnt; the searcher picks strategies from it."""

    flavor: str  # "elasticsearch" | "opensearch"
    version: str
    license_type: str | None
    native_rrf: bool
    native_rrf_reason: str  # why not, when native_rrf is False
    plugins: tuple[str, ...] = ()
    hybrid: bool = False  # OpenSearch hybrid query + RRF search pipeline
    hybrid_reason: str = ""  # why not, when hybrid is False
    knn_engines: tuple[str, ...] = field(default=())  # OpenSearch k-NN engines it can serve

    @property
    def version_tuple(self) -> tuple[int, ...]:
        return tuple(int(p) for p in self.version.split("-")[0].split(".")[:3] if p.isdigit())


class Engine(ABC):
    """A search server behind its own client. Construction does no I/O."""

    flavor: ClassVar[str]
    #: the client library's ``helpers`` module (scan, streaming_bulk) and its 404 error;
    #: both libraries share those signatures, so the methods using them live here.
    helpers_module: ClassVar[str]
    not_found: ClassVar[type[Exception]]

    @property
    def helpers(self) -> ModuleType:
        """Imported at first use: elasticsearch's helpers import its asyncio client (a
        second copy of the whole API), which a command that writes nothing never needs."""
        return importlib.import_module(self.helpers_module)

    def __init__(self, client: Any) -> None:
        self.client = client

    @staticmethod
    @abstractmethod
    def body(resp: Any) -> Any:
        """The JSON of a client response (elasticsearch-py wraps it, opensearch-py does not)."""

    # --- errors --------------------------------------------------------------------------
    #: the client's exception classes: timeouts, refused or dropped connections, and HTTP
    #: answers with an error status (each client names them differently).
    timeout_errors: ClassVar[tuple[type[Exception], ...]]
    connection_errors: ClassVar[tuple[type[Exception], ...]]
    api_errors: ClassVar[tuple[type[Exception], ...]]

    @contextlib.contextmanager
    def errors(self, what: str) -> Iterator[None]:
        """Map this client's exceptions to es-rag's at the boundary, naming the operation:
        a server that is down, slow or busy (429, 502-504) is transient, the rest not."""
        try:
            yield
        except self.timeout_errors as exc:
            raise EngineUnavailableError(f"{what}: search server timed out ({exc})") from exc
        except self.connection_errors as exc:
            raise EngineUnavailableError(f"{what}: search server unreachable ({exc})") from exc
        except self.api_errors as exc:
            status, reason = self.status_and_reason(exc)
            if status in (429, 502, 503, 504):
                raise EngineUnavailableError(f"{what}: server busy ({status}: {exc})") from exc
            raise EngineError(f"{what}: {status} {reason}") from exc

    @staticmethod
    @abstractmethod
    def status_and_reason(exc: Exception) -> tuple[int | None, str]:
        """The HTTP status of an API error and the server's reason."""

    def call(self, what: str, fn: Callable[[], T]) -> T:
        with self.errors(what):
            return fn()

    # --- reads ---------------------------------------------------------------------------
    @abstractmethod
    def search(
        self, index: str, body: dict[str, Any], *, params: dict[str, Any] | None = None
    ) -> dict[str, Any]: ...

    @abstractmethod
    def msearch(self, searches: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Header/body pairs in, one response per search out; an item error raises."""

    @abstractmethod
    def count(self, index: str, query: dict[str, Any]) -> int: ...

    def scan(self, index: str, body: dict[str, Any], *, size: int = 1000) -> Iterator[dict]:
        """Every hit of ``body`` (scroll), for bookkeeping reads such as a document's chunks."""
        with self.errors(f"scan {index}"):
            yield from self.helpers.scan(self.client, index=index, query=body, size=size)

    # --- indices and aliases -------------------------------------------------------------
    def alias_indices(self, alias: str) -> list[str]:
        """Concrete indices behind ``alias``, sorted; [] when the alias does not exist."""
        with self.errors(f"resolve alias {alias}"):
            try:
                resp = self.client.indices.get_alias(name=alias)
            except self.not_found:
                return []
        return sorted(self.body(resp))

    @abstractmethod
    def index_exists(self, name: str) -> bool: ...

    @abstractmethod
    def list_indices(self, pattern: str) -> list[str]: ...

    def mapping(self, index: str) -> dict[str, Any]:
        """The ``mappings`` object of one concrete index."""
        resp = self.call("read mapping", lambda: self.client.indices.get_mapping(index=index))
        return dict(self.body(resp)[index]["mappings"])

    @abstractmethod
    def create_index(self, name: str, body: dict[str, Any]) -> None: ...

    def ensure_index(self, name: str, body: dict[str, Any]) -> bool:
        """Create ``name`` unless it exists; True when it had to be created (or another
        writer created it meanwhile: losing that race is fine)."""
        if self.index_exists(name):
            return False
        try:
            self.create_index(name, body)
        except Exception:
            if not self.index_exists(name):
                raise
        return True

    def put_mapping(self, index: str, properties: dict[str, Any]) -> None:
        """Add fields to an index's mapping (additive; existing fields must not change)."""
        self.call(
            f"update mapping of {index}",
            lambda: self.client.indices.put_mapping(index=index, body={"properties": properties}),
        )

    def put_meta(self, index: str, meta: dict[str, Any]) -> None:
        """Replace the mapping's ``_meta`` (the index contract) of a concrete index."""
        self.call(
            f"update _meta of {index}",
            lambda: self.client.indices.put_mapping(index=index, body={"_meta": meta}),
        )

    @abstractmethod
    def delete_index(self, name: str) -> None: ...

    def update_aliases(self, actions: list[dict[str, Any]]) -> None:
        """One ``_aliases`` request: every action applies, atomically, or none does."""
        self.call(
            "update aliases",
            lambda: self.client.indices.update_aliases(body={"actions": actions}),
        )

    def refresh(self, index: str) -> None:
        self.call("refresh", lambda: self.client.indices.refresh(index=index))

    @abstractmethod
    def index_settings(self, index: str) -> dict[str, Any]:
        """``{concrete index: its "index" settings}`` for an index, alias or pattern."""

    def write_blocks(self, index: str) -> list[str]:
        """Blocks that make writes to ``index`` fail, e.g. the flood-stage read-only block.

        A blocked index answers every bulk item with 403/429 forever; naming the block
        lets the caller fail once, clearly, instead of retrying.
        """
        found = []
        for name, settings in self.index_settings(index).items():
            blocks = settings.get("blocks") or {}
            for key in ("read_only", "read_only_allow_delete", "write"):
                if str(blocks.get(key, "false")).lower() == "true":
                    found.append(f"{name}: index.blocks.{key}")
        return found

    # --- single documents (status rows, version fences) -----------------------------------
    def put(
        self,
        index: str,
        doc_id: str,
        body: dict[str, Any],
        *,
        version: int | None = None,
        refresh: bool = False,
    ) -> bool:
        """Index one document; with ``version`` as an external_gte fence.

        Returns False (writes nothing) when the stored version is higher: the server
        decides atomically, so two writers racing with versions 5 and 6 keep 6.
        """
        params: dict[str, Any] = {"refresh": "true" if refresh else "false"}
        if version is not None:
            params.update(version=version, version_type="external_gte")
        with self.errors(f"write {index}/{doc_id}"):
            try:
                self._index_one(index, doc_id, body, params)
            except Exception as exc:
                if version is not None and self._is_conflict(exc):
                    return False
                raise
        return True

    @abstractmethod
    def _index_one(
        self, index: str, doc_id: str, body: dict[str, Any], params: dict[str, Any]
    ) -> None:
        """The client's single-document index call."""

    @abstractmethod
    def _is_conflict(self, exc: Exception) -> bool:
        """Whether the client's exception is a version conflict (409)."""

    def get(self, index: str, doc_id: str) -> dict[str, Any] | None:
        """``_source`` plus ``_version`` of one document, None when absent."""
        with self.errors(f"read {index}/{doc_id}"):
            try:
                resp = self.body(self.client.get(index=index, id=doc_id))
            except self.not_found:
                return None
        return {**resp.get("_source", {}), "_version": resp.get("_version")}

    def delete_doc(self, index: str, doc_id: str) -> None:
        """Delete one document by id; an absent one is already gone."""
        with self.errors(f"delete {index}/{doc_id}"), contextlib.suppress(self.not_found):
            self.client.delete(index=index, id=doc_id)

    def vectors_source(self, index: str) -> Any:
        """The ``_source`` value that returns rows whole, vectors included."""
        return True

    def index_body(self, settings: Settings, contract: IndexContract) -> dict[str, Any]:
        """The create-index body for this engine (mapping template filled from settings)."""
        return build_index_body(settings, contract, engine=self.flavor)

    # --- writes --------------------------------------------------------------------------
    def streaming_bulk(
        self,
        actions: Iterable[dict[str, Any]],
        *,
        chunk_size: int,
        max_retries: int,
        initial_backoff: float,
    ) -> Iterator[tuple[bool, dict[str, Any]]]:
        """The client library's ``helpers.streaming_bulk`` with errors collected, not raised."""
        with self.errors("bulk write"):
            yield from self.helpers.streaming_bulk(
                self.client,
                actions,
                chunk_size=chunk_size,
                max_retries=max_retries,
                initial_backoff=initial_backoff,
                raise_on_error=False,
                raise_on_exception=True,
            )

    # --- request shapes that differ (pure) -----------------------------------------------
    @abstractmethod
    def knn_body(
        self,
        vector: Sequence[float],
        *,
        acl: dict[str, Any],
        size: int,
        num_candidates: int,
        filters: Sequence[dict[str, Any]] = (),
    ) -> dict[str, Any]:
        """A kNN search on this engine, pre-filtered by the ACL inside the graph walk."""

    def ensure_search_pipeline(self, name: str, body: dict[str, Any]) -> bool:
        """Create or update search pipeline ``name``; True when it was written."""
        raise StrategyUnavailableError(
            f"search pipelines are OpenSearch's; {self.flavor} cannot run {name!r}"
        )

    # --- cluster -------------------------------------------------------------------------
    @abstractmethod
    def probe(self, index: str) -> ClusterInfo: ...

    def node(self) -> tuple[str, tuple[str, ...]]:
        """(version, plugins and modules) of the node the client reached."""
        with self.errors("probe nodes"):
            nodes = self._local_node_info()
        return node_summary(self.body(nodes))

    @abstractmethod
    def _local_node_info(self) -> Any:
        """The client's ``_nodes/_local`` call, filtered to ``NODE_FILTER``."""

    def close(self) -> None:
        self.client.close()


NODE_FILTER = "nodes.*.version,nodes.*.plugins.name,nodes.*.modules.name"


def node_summary(nodes: dict[str, Any]) -> tuple[str, tuple[str, ...]]:
    """(version, sorted plugin and module names) of the one node a ``_nodes/_local`` names."""
    for node in (nodes.get("nodes") or {}).values():
        names = [p.get("name", "") for p in (node.get("plugins") or [])]
        names += [m.get("name", "") for m in (node.get("modules") or [])]
        return str(node.get("version", "unknown")), tuple(sorted(n for n in names if n))
    return "unknown", ()


def error_reason(body: Any, fallback: str) -> str:
    """``type: reason`` of the first root cause in an error body (both engines use it)."""
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        root = (error.get("root_cause") or [error])[0]
        if not root.get("reason") and isinstance(error.get("caused_by"), dict):
            root = error["caused_by"]  # OpenSearch leaves root_cause empty at times
        return f"{root.get('type', '')}: {root.get('reason', '')}".strip(": ")
    if isinstance(error, str):
        return error
    return fallback


def check_msearch_items(responses: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for item in responses:
        if "error" in item:
            status = item.get("status")
            message = f"msearch: {status} {error_reason(item, str(item['error']))}"
            if status in (429, 502, 503, 504):
                raise EngineUnavailableError(message)
            raise EngineError(message)
        check_shards(item, "msearch")
    return responses


def check_shards(resp: dict[str, Any], what: str) -> dict[str, Any]:
    """A response missing some shards is an error, not a smaller answer.

    The server answers 200 with the hits of the shards it reached when others fail (a
    node going down, a primary moving to its replica). Ranked from part of the index, a
    search would silently drop evidence, and a bookkeeping count would call a complete
    document incomplete. It is transient: the replica takes over within seconds.
    """
    shards = resp.get("_shards") or {}
    failed = int(shards.get("failed") or 0)
    if failed:
        reasons = [
            error_reason({"error": f.get("reason")}, str(f.get("reason")))
            for f in (shards.get("failures") or [])[:2]
        ]
        raise EngineUnavailableError(
            f"{what}: {failed} of {shards.get('total')} shards failed ({'; '.join(reasons)})"
        )
    return resp
