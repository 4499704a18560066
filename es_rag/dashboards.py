"""Kibana and OpenSearch Dashboards: es-rag's saved objects, filled in and imported.

``dashboards/`` (``es_rag.saved_objects`` when installed) holds one NDJSON file per
product, written by ``scripts/build_dashboards.py``: data views on the chunk alias and on
``<alias>-status``, three saved searches, five visualizations and the "es-rag ingestion"
dashboard. They are templates: ``{{alias}}`` is in every id and index pattern, so the
objects of two aliases live side by side in one space, and ``{{tenant}}`` is the tenant of
the "documents of a tenant" search (``*``, every tenant, unless one is given).

Everything here but ``install`` is pure: ``render`` fills the templates in, and
``import_request`` builds the one request the documented saved-objects import API takes
(``POST [/s/<space>]/api/saved_objects/_import?overwrite=true``, an XSRF header, the NDJSON
as the multipart part ``file``). ``overwrite=true`` with fixed ids is what makes an install
idempotent: a second run replaces the same objects instead of adding copies.
"""

from __future__ import annotations

import base64
import json
import re
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from es_rag.errors import ConfigurationError, DashboardsError

KIBANA = "kibana"
OPENSEARCH_DASHBOARDS = "opensearch-dashboards"
ENGINES = (KIBANA, OPENSEARCH_DASHBOARDS)
FILES = {KIBANA: "kibana.ndjson", OPENSEARCH_DASHBOARDS: "opensearch-dashboards.ndjson"}

IMPORT_PATH = "/api/saved_objects/_import"
#: The header each product's CSRF protection requires on every POST (any value will do).
XSRF_HEADERS = {KIBANA: "kbn-xsrf", OPENSEARCH_DASHBOARDS: "osd-xsrf"}
#: The header each product names itself with on its responses (how ``auto`` tells them apart).
NAME_HEADERS = {KIBANA: "kbn-name", OPENSEARCH_DASHBOARDS: "osd-name"}

ALIAS = "{{alias}}"
TENANT = "{{tenant}}"
_PLACEHOLDER = re.compile(r"\{\{(alias|tenant)\}\}")
#: Attributes whose value is JSON in a string; placeholders inside are filled in on the
#: decoded value, so that a filled-in value is escaped once, where it lands.
EMBEDDED_JSON = frozenset(
    {"searchSourceJSON", "visState", "uiStateJSON", "panelsJSON", "optionsJSON"}
)

# Elasticsearch's (and OpenSearch's) rules for index and alias names.
_NAME_FORBIDDEN = set('\\/*?"<>| ,#:') | {"{", "}"}
_SPACE_ID = re.compile(r"^[a-z0-9_-]+$")
#: Statuses that mean "not ready yet, try again" while ``--wait`` lasts, and the pause.
_NOT_READY = (502, 503, 504)
RETRY_DELAY_S = 2.0


def template_text(engine: str) -> str:
    """The NDJSON template of ``engine``: the repository's ``dashboards/`` in a checkout,
    the installed package's otherwise (read as a resource: a namespace package has no
    single directory to name)."""
    if engine not in FILES:
        raise ConfigurationError(f"unknown dashboards engine {engine!r}: {' or '.join(ENGINES)}")
    repo = Path(__file__).resolve().parents[1] / "dashboards" / FILES[engine]
    if repo.is_file():
        return repo.read_text(encoding="utf-8")
    return (resources.files("es_rag.saved_objects") / FILES[engine]).read_text(encoding="utf-8")


def load_templates(engine: str) -> list[dict[str, Any]]:
    """The saved objects of ``engine`` with their placeholders, in file order."""
    return [json.loads(line) for line in template_text(engine).splitlines() if line]


def check_alias(alias: str) -> str:
    """``alias`` if it is a valid index alias name, else a ``ConfigurationError``.

    The alias becomes saved-object ids, index patterns and titles; a name the search server
    would refuse (or a wildcard, which would silently widen the data view) is refused here.
    """
    bad = sorted(set(alias) & _NAME_FORBIDDEN)
    if (
        not alias
        or alias in (".", "..")
        or alias != alias.lower()
        or alias[0] in "-_+"
        or bad
        or any(ord(c) < 32 for c in alias)
        or len(alias.encode("utf-8")) > 255
    ):
        why = f" (it contains {''.join(bad)!r})" if bad else ""
        raise ConfigurationError(
            f'{alias!r} is not an index alias name{why}: lowercase, no \\ / * ? " < > | '
            "space , # :, not starting with - _ +"
        )
    return alias


def lucene_phrase(value: str) -> str:
    """``value`` as one quoted Lucene term, whatever characters it holds."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render(engine: str, *, alias: str, tenant: str | None = None) -> list[dict[str, Any]]:
    """The saved objects of ``engine`` for ``alias`` (and ``tenant``, if one), ready to import."""
    values = {ALIAS: check_alias(alias), TENANT: "*" if tenant is None else lucene_phrase(tenant)}
    return [_fill(obj, values) for obj in load_templates(engine)]


def _fill(value: Any, values: dict[str, str], key: str | None = None) -> Any:
    if isinstance(value, dict):
        return {k: _fill(v, values, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, values) for v in value]
    if isinstance(value, str):
        if key in EMBEDDED_JSON and value[:1] in ("{", "["):
            return _dumps(_fill(json.loads(value), values))
        # One pass: a filled-in value is never searched for placeholders again.
        return _PLACEHOLDER.sub(lambda m: values[m.group(0)], value)
    return value


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def to_ndjson(objects: list[dict[str, Any]]) -> bytes:
    return "".join(_dumps(obj) + "\n" for obj in objects).encode("utf-8")


# --- the request ------------------------------------------------------------------------
@dataclass(frozen=True)
class ImportRequest:
    """One saved-objects import, as plain data (``install`` sends it with httpx)."""

    method: str
    url: str
    params: dict[str, str]
    headers: dict[str, str]
    filename: str
    content: bytes
    content_type: str = "application/ndjson"
    objects: int = 0


def auth_headers(
    *, api_key: str | None = None, user: str | None = None, password: str | None = None
) -> dict[str, str]:
    """The ``Authorization`` header for an API key (Kibana) or a user and password."""
    if api_key and (user or password):
        raise ConfigurationError("give an API key or a user and password, not both")
    if api_key:
        return {"Authorization": f"ApiKey {api_key}"}
    if user or password:
        if not (user and password):
            raise ConfigurationError("a user needs a password (and a password a user)")
        token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
        return {"Authorization": f"Basic {token}"}
    return {}


def base_url(url: str) -> str:
    """``url`` without a trailing slash; it may carry a base path (``https://host/kibana``)."""
    url = url.strip().rstrip("/")
    if not re.match(r"^https?://[^/\s]+", url):
        raise ConfigurationError(f"--url must be an http(s) URL of Kibana, not {url!r}")
    return url


def import_request(
    url: str,
    *,
    engine: str,
    content: bytes,
    space: str | None = None,
    headers: dict[str, str] | None = None,
) -> ImportRequest:
    """The documented import call of ``engine`` for ``content`` (an NDJSON file).

    A Kibana space is a path prefix (``/s/<space>``; ``default`` has none); OpenSearch
    Dashboards has security tenants instead, chosen with the ``securitytenant`` header.
    """
    if engine not in ENGINES:
        raise ConfigurationError(f"unknown dashboards engine {engine!r}: {' or '.join(ENGINES)}")
    path = IMPORT_PATH
    extra: dict[str, str] = {}
    if space is not None:
        if engine == KIBANA:
            if not _SPACE_ID.match(space):
                raise ConfigurationError(
                    f"{space!r} is not a Kibana space id (lowercase letters, digits, _ and -)"
                )
            if space != "default":
                path = f"/s/{space}{IMPORT_PATH}"
        else:
            if not space.strip():
                raise ConfigurationError("--space (the security tenant) must not be empty")
            extra["securitytenant"] = space
    return ImportRequest(
        method="POST",
        url=base_url(url) + path,
        params={"overwrite": "true"},
        headers={XSRF_HEADERS[engine]: "true", **extra, **(headers or {})},
        filename=f"es-rag-{engine}.ndjson",
        content=content,
        objects=content.count(b"\n"),
    )


def summarize(status: int, body: Any, request: ImportRequest) -> dict[str, Any]:
    """What the import answered, as es-rag reports it; an HTTP error raises."""
    if status != 200 or not isinstance(body, dict) or "success" not in body:
        message = body.get("message") if isinstance(body, dict) else None
        text = message or (body if isinstance(body, str) else json.dumps(body))[:300]
        raise DashboardsError(f"import refused by {request.url}: HTTP {status}: {text}")
    errors = [
        {
            "type": e.get("type"),
            "id": e.get("id"),
            "title": e.get("title") or (e.get("meta") or {}).get("title"),
            "error": (e.get("error") or {}).get("type"),
        }
        for e in body.get("errors") or []
    ]
    return {
        "success": bool(body["success"]) and not errors,
        "successCount": int(body.get("successCount", 0)),
        "objects": request.objects,
        "errors": errors,
    }


# --- the one function that does I/O -----------------------------------------------------
def detect_engine(response_headers: Any) -> str | None:
    """``kibana`` or ``opensearch-dashboards`` from the name header every response carries."""
    for engine, header in NAME_HEADERS.items():
        if header in response_headers:
            return engine
    return None


def install(
    url: str,
    *,
    alias: str,
    engine: str = "auto",
    tenant: str | None = None,
    space: str | None = None,
    api_key: str | None = None,
    user: str | None = None,
    password: str | None = None,
    wait_s: float = 0.0,
    timeout_s: float = 60.0,
) -> dict[str, Any]:
    """Import the saved objects for ``alias`` into Kibana or OpenSearch Dashboards at ``url``.

    ``wait_s`` keeps trying while the server is unreachable or answers 502-504 (Kibana says
    503 until it has started), for a setup job that starts alongside it. Raises
    ``DashboardsError`` when the server cannot be reached or refuses the request; a partial
    import is reported (``success: false`` and its ``errors``), not raised.
    """
    import httpx

    base = base_url(url)
    auth = auth_headers(api_key=api_key, user=user, password=password)
    if engine != "auto" and engine not in ENGINES:
        raise ConfigurationError(f"--engine must be auto, {' or '.join(ENGINES)}, not {engine!r}")
    deadline = time.monotonic() + max(0.0, wait_s)
    with httpx.Client(timeout=timeout_s) as client:

        def call(method: str, target: str, **kwargs: Any) -> httpx.Response:
            while True:
                try:
                    response = client.request(method, target, **kwargs)
                except httpx.TransportError as exc:
                    if time.monotonic() >= deadline:
                        raise DashboardsError(f"cannot reach {base}: {exc}") from exc
                else:
                    if response.status_code not in _NOT_READY or time.monotonic() >= deadline:
                        return response
                time.sleep(min(RETRY_DELAY_S, max(0.0, deadline - time.monotonic())))

        if engine == "auto":
            probe = call("GET", f"{base}/api/status", headers=auth)
            found = detect_engine(probe.headers)
            if found is None:
                raise DashboardsError(
                    f"{base} is neither Kibana nor OpenSearch Dashboards (HTTP "
                    f"{probe.status_code}, no kbn-name or osd-name header); pass --engine"
                )
            engine = found
        request = import_request(
            base,
            engine=engine,
            content=to_ndjson(render(engine, alias=alias, tenant=tenant)),
            space=space,
            headers=auth,
        )
        response = call(
            request.method,
            request.url,
            params=request.params,
            headers=request.headers,
            files={"file": (request.filename, request.content, request.content_type)},
        )
    try:
        body: Any = response.json()
    except ValueError:
        body = response.text
    summary = summarize(response.status_code, body, request)
    return {"engine": engine, "url": base, "space": space, "alias": alias, **summary}
