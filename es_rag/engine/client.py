"""Connection to the search server and the cluster probe.

The probe never calls ``GET /`` (``client.info()``): the integ-test distribution answers it
with 405, and some proxies hide it. Version comes from the nodes API, the license from
``_license`` and native RRF from a cheap capability check (a zero-size search with an
``rrf`` retriever), because the license alone does not say whether the rank-rrf module is
installed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import elastic_transport
from elasticsearch import ApiError, Elasticsearch, NotFoundError

from es_rag.config import Settings
from es_rag.errors import EngineError, EngineUnavailableError

T = TypeVar("T")


def make_client(settings: Settings) -> Elasticsearch:
    """An Elasticsearch client from settings; creating it does no I/O."""
    kwargs: dict[str, Any] = {
        "request_timeout": settings.es_request_timeout,
        "retry_on_timeout": True,
        "max_retries": 3,
    }
    if settings.es_api_key is not None:
        kwargs["api_key"] = settings.es_api_key.get_secret_value()
    elif settings.es_username:
        password = settings.es_password.get_secret_value() if settings.es_password else ""
        kwargs["basic_auth"] = (settings.es_username, password)
    if settings.es_ca_certs is not None:
        kwargs["ca_certs"] = str(settings.es_ca_certs)
    if settings.es_url.startswith("https"):
        kwargs["verify_certs"] = settings.es_verify_certs
    return Elasticsearch(settings.es_url, **kwargs)


@contextlib.contextmanager
def engine_errors(what: str) -> Iterator[None]:
    """Map client exceptions to es-rag's at the boundary, naming the operation."""
    try:
        yield
    except elastic_transport.ConnectionError as exc:
        raise EngineUnavailableError(f"{what}: search server unreachable ({exc})") from exc
    except elastic_transport.ConnectionTimeout as exc:
        raise EngineUnavailableError(f"{what}: search server timed out ({exc})") from exc
    except ApiError as exc:
        if exc.meta.status in (429, 502, 503, 504):
            raise EngineUnavailableError(f"{what}: server busy ({exc.meta.status}: {exc})") from exc
        raise EngineError(f"{what}: {exc.meta.status} {_reason(exc)}") from exc


def call(what: str, fn: Callable[[], T]) -> T:
    with engine_errors(what):
        return fn()


def _reason(exc: ApiError) -> str:
    body = exc.body if isinstance(exc.body, dict) else {}
    error = body.get("error")
    if isinstance(error, dict):
        root = (error.get("root_cause") or [error])[0]
        return f"{root.get('type', '')}: {root.get('reason', '')}".strip(": ")
    return str(exc.message)


@dataclass(frozen=True)
class ClusterInfo:
    """What the probe learnt; the searcher picks strategies from it."""

    flavor: str  # "elasticsearch" (OpenSearch comes with its own issue)
    version: str
    license_type: str | None
    native_rrf: bool
    native_rrf_reason: str  # why not, when native_rrf is False

    @property
    def version_tuple(self) -> tuple[int, ...]:
        return tuple(int(p) for p in self.version.split("-")[0].split(".")[:3] if p.isdigit())


def probe_cluster(client: Elasticsearch, index: str) -> ClusterInfo:
    version = _node_version(client)
    license_type = _license_type(client)
    ok, reason = _native_rrf_available(client, index)
    return ClusterInfo(
        flavor="elasticsearch",
        version=version,
        license_type=license_type,
        native_rrf=ok,
        native_rrf_reason=reason,
    )


def _node_version(client: Elasticsearch) -> str:
    with engine_errors("probe nodes"):
        nodes = client.nodes.info(node_id="_local", metric="_none", filter_path="nodes.*.version")
    for node in (nodes.body.get("nodes") or {}).values():
        return str(node.get("version", "unknown"))
    return "unknown"


def _license_type(client: Elasticsearch) -> str | None:
    try:
        lic = client.license.get()
    except (ApiError, elastic_transport.TransportError):
        return None  # no license API (OSS builds, proxies): the capability check decides
    return str(lic.body.get("license", {}).get("type") or "") or None


def _native_rrf_available(client: Elasticsearch, index: str) -> tuple[bool, str]:
    body = {
        "size": 0,
        "retriever": {
            "rrf": {
                "retrievers": [
                    {"standard": {"query": {"match_none": {}}}},
                    {"standard": {"query": {"match_none": {}}}},
                ]
            }
        },
    }
    try:
        client.search(index=index, body=body, ignore_unavailable=True, allow_no_indices=True)
    except NotFoundError as exc:
        return False, f"index {index!r} not found ({_reason(exc)})"
    except ApiError as exc:
        reason = _reason(exc)
        if exc.meta.status == 403 or "license" in reason.lower():
            return False, f"the cluster's license does not allow RRF ({reason})"
        return False, f"the cluster has no rrf retriever ({reason})"
    except elastic_transport.TransportError as exc:
        raise EngineUnavailableError(f"probe: search server unreachable ({exc})") from exc
    return True, ""
