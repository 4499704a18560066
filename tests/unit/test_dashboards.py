"""The shipped Kibana / OpenSearch Dashboards saved objects, checked without either.

Kibana cannot run here, so the NDJSON is held to what the products themselves enforce,
read from their sources (Kibana 9.2, OpenSearch Dashboards 3.x):

- the import envelope of each: Kibana's ``coreMigrationVersion``/``typeMigrationVersion``
  (the format a document is in decides which migrations run on import),
  OpenSearch Dashboards' ``migrationVersion``;
- the attributes each type accepts: Kibana validates ``dashboard``, ``search`` and
  ``visualization`` attributes with ``unknowns: forbid`` schemas; OpenSearch Dashboards
  indexes them into a mapping that is strict at the root, so an unknown attribute fails;
- references: every ``indexRefName`` and ``panelRefName`` resolves, to an object in the
  same file (an import with a missing reference fails with ``missing_references``);
- fields: every field a saved object names exists in the mapping behind its data view,
  with a type that its use needs (a terms agg on a ``text`` field fails in Kibana).

The install request is checked against a local HTTP server that records it and answers
like Kibana; the queries themselves run on real servers in
``tests/integration/test_dashboards.py``.
"""

from __future__ import annotations

import email.parser
import email.policy
import importlib.util
import json
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import metadata
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from typer.testing import CliRunner

from es_rag import dashboards
from es_rag.cli import app
from es_rag.dashboards import KIBANA, OPENSEARCH_DASHBOARDS
from es_rag.engine.status import STATUSES
from es_rag.errors import ConfigurationError, DashboardsError
from tests.conftest import free_port
from tests.saved_objects import (
    AGG_FIELD_TYPES,
    AGGREGATABLE,
    DATES,
    ROOT,
    SEARCHABLE,
    clauses,
    index_pattern_of,
    query_of,
    search_source,
    view_fields,
    vis_state,
)

pytestmark = pytest.mark.unit

ENGINES = (KIBANA, OPENSEARCH_DASHBOARDS)
TYPES = ("index-pattern", "search", "visualization", "dashboard")

# --- what each product accepts ----------------------------------------------------------
# Kibana 9.2's attribute schemas: dashboard (schema v1, `unknowns: forbid`), search (the
# 8.8.0 base schema of saved_search), visualization (its 8.8.0 schema); index-pattern has
# no schema, its keys are DataViewAttributes.
KIBANA_ATTRIBUTES = {
    "index-pattern": {
        "title",
        "name",
        "timeFieldName",
        "fields",
        "fieldFormatMap",
        "fieldAttrs",
        "runtimeFieldMap",
        "sourceFilters",
        "typeMeta",
        "type",
        "allowNoIndex",
        "allowHidden",
    },
    "search": {
        "title",
        "description",
        "columns",
        "sort",
        "grid",
        "rowHeight",
        "rowsPerPage",
        "hideChart",
        "breakdownField",
        "kibanaSavedObjectMeta",
        "isTextBasedQuery",
        "usesAdHocDataView",
        "timeRestore",
        "timeRange",
        "refreshInterval",
        "viewMode",
        "hideAggregatedPreview",
        "hits",
        "version",
    },
    "visualization": {
        "title",
        "description",
        "version",
        "kibanaSavedObjectMeta",
        "uiStateJSON",
        "visState",
        "savedSearchRefName",
    },
    "dashboard": {
        "title",
        "description",
        "kibanaSavedObjectMeta",
        "timeRestore",
        "timeFrom",
        "timeTo",
        "refreshInterval",
        "controlGroupInput",
        "panelsJSON",
        "optionsJSON",
        "hits",
        "version",
    },
}
# OpenSearch Dashboards 3.x: each type's mapping properties (the saved-objects index is
# strict at the root; index-pattern alone is `dynamic: false`, its keys are the 7.10
# IndexPatternAttributes).
OSD_ATTRIBUTES = {
    "index-pattern": {
        "title",
        "timeFieldName",
        "intervalName",
        "fields",
        "sourceFilters",
        "fieldFormatMap",
        "type",
        "typeMeta",
    },
    "search": {
        "columns",
        "description",
        "hits",
        "kibanaSavedObjectMeta",
        "sort",
        "columnWidths",
        "title",
        "version",
    },
    "visualization": {
        "description",
        "kibanaSavedObjectMeta",
        "savedSearchRefName",
        "title",
        "uiStateJSON",
        "version",
        "visState",
    },
    "dashboard": {
        "description",
        "hits",
        "kibanaSavedObjectMeta",
        "optionsJSON",
        "panelsJSON",
        "refreshInterval",
        "timeFrom",
        "timeRestore",
        "timeTo",
        "title",
        "version",
    },
}
REQUIRED_ATTRIBUTES = {
    "index-pattern": {"title"},
    "search": {"title", "columns", "sort", "kibanaSavedObjectMeta"},
    "visualization": {"title", "visState", "kibanaSavedObjectMeta"},
    "dashboard": {"title", "panelsJSON"},
}
# The last migration each OpenSearch Dashboards 3.x type defines: an object at that
# version gets none, one above it is refused as "from a more recent version".
OSD_LAST_MIGRATION = {
    "index-pattern": "7.6.0",
    "search": "7.9.3",
    "visualization": "7.10.0",
    "dashboard": "7.9.3",
}
KIBANA_VERSION = (9, 2, 8)
ENVELOPES = {
    KIBANA: {
        "id",
        "type",
        "attributes",
        "references",
        "coreMigrationVersion",
        "typeMigrationVersion",
        "managed",
    },
    OPENSEARCH_DASHBOARDS: {"id", "type", "attributes", "references", "migrationVersion"},
}
# Aggregation-based chart types both products render, and the schemas of their aggs.
VIS_SCHEMAS = {
    "histogram": {"metric", "segment", "group", "split"},
    "line": {"metric", "segment", "group", "split"},
    "pie": {"metric", "segment", "split"},
}
GRID_COLUMNS = 48


def semver(text: str) -> tuple[int, ...]:
    assert re.fullmatch(r"\d+\.\d+\.\d+", text), text
    return tuple(int(p) for p in text.split("."))


@pytest.fixture(scope="module", params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture(scope="module")
def objects(engine: str) -> list[dict[str, Any]]:
    return dashboards.load_templates(engine)


def of_type(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["type"] == kind]


def by_name(objects: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(o for o in objects if o["id"] == f"es-rag.{name}.{{{{alias}}}}")


# --- the files --------------------------------------------------------------------------
def test_files_are_what_the_build_script_writes() -> None:
    """The NDJSON is generated; an edit by hand (or a stale file) fails here."""
    spec = importlib.util.spec_from_file_location(
        "build_dashboards", ROOT / "scripts" / "build_dashboards.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name, text in module.build().items():
        assert (ROOT / "dashboards" / name).read_text(encoding="utf-8") == text, (
            f"dashboards/{name} is stale: run scripts/build_dashboards.py"
        )


@pytest.mark.parametrize("engine_file", sorted(dashboards.FILES.values()))
def test_ndjson_is_one_object_per_line(engine_file: str) -> None:
    raw = (ROOT / "dashboards" / engine_file).read_bytes()
    text = raw.decode("utf-8")
    assert text.endswith("\n") and "\r" not in text
    lines = text.split("\n")[:-1]
    assert lines and all(line.strip() == line and line for line in lines)
    for line in lines:
        assert isinstance(json.loads(line), dict)


def test_the_objects_the_issue_asks_for(objects: list[dict[str, Any]]) -> None:
    kinds = [o["type"] for o in objects]
    assert kinds.count("index-pattern") == 2
    assert kinds.count("search") == 3
    assert kinds.count("visualization") == 5
    assert kinds.count("dashboard") == 1
    # dependencies before dependants (as an export writes them)
    assert kinds == sorted(kinds, key=TYPES.index)
    titles = {o["attributes"]["title"] for o in objects}
    assert "es-rag ingestion ({{alias}})" in titles


def test_envelope_follows_the_import_format(engine: str, objects: list[dict[str, Any]]) -> None:
    ids = [(o["type"], o["id"]) for o in objects]
    assert len(set(ids)) == len(ids)
    for obj in objects:
        assert set(obj) == ENVELOPES[engine], obj["id"]
        assert obj["type"] in TYPES
        # every id names the alias, so two aliases' objects coexist in one space
        assert re.fullmatch(r"es-rag\.[a-z-]+\.\{\{alias\}\}", obj["id"]), obj["id"]
        assert isinstance(obj["attributes"], dict) and isinstance(obj["references"], list)
        if engine == KIBANA:
            assert semver(obj["coreMigrationVersion"]) <= KIBANA_VERSION
            assert semver(obj["typeMigrationVersion"]) <= KIBANA_VERSION
            assert obj["managed"] is False
        else:
            assert obj["migrationVersion"] == {obj["type"]: OSD_LAST_MIGRATION[obj["type"]]}


def test_kibana_declares_the_format_each_object_is_written_in() -> None:
    """The visState is OpenSearch Dashboards' (7.10) format in both files: Kibana must be
    told so, or it would skip the 7.11-8.5 migrations that bring it up to date."""
    objects = dashboards.load_templates(KIBANA)
    versions = {o["type"]: o["typeMigrationVersion"] for o in objects}
    assert versions == {
        "index-pattern": "7.11.0",
        "search": "7.9.3",
        "visualization": "7.10.0",
        "dashboard": "8.7.0",
    }


def test_visualizations_are_the_same_in_both_files() -> None:
    kibana = of_type(dashboards.load_templates(KIBANA), "visualization")
    osd = of_type(dashboards.load_templates(OPENSEARCH_DASHBOARDS), "visualization")
    assert [o["attributes"] for o in kibana] == [o["attributes"] for o in osd]


def test_attributes_are_those_the_type_accepts(engine: str, objects: list[dict[str, Any]]) -> None:
    accepted = KIBANA_ATTRIBUTES if engine == KIBANA else OSD_ATTRIBUTES
    for obj in objects:
        attrs = obj["attributes"]
        kind = obj["type"]
        assert set(attrs) <= accepted[kind], (obj["id"], set(attrs) - accepted[kind])
        assert REQUIRED_ATTRIBUTES[kind] <= set(attrs), obj["id"]
        assert isinstance(attrs["title"], str) and attrs["title"]
        for key in ("description", "timeFieldName", "uiStateJSON", "visState", "panelsJSON"):
            if key in attrs:
                assert isinstance(attrs[key], str), (obj["id"], key)
        for key in ("version", "hits"):
            if key in attrs:
                assert type(attrs[key]) is int, (obj["id"], key)
        if "kibanaSavedObjectMeta" in attrs:
            assert set(attrs["kibanaSavedObjectMeta"]) == {"searchSourceJSON"}
            assert isinstance(search_source(obj), dict)
        for key in ("uiStateJSON", "optionsJSON", "visState", "panelsJSON", "fields"):
            if key in attrs:
                json.loads(attrs[key])  # JSON in a string, as the type stores it
        if kind == "search":
            assert all(isinstance(c, str) for c in attrs["columns"])
            for sort in attrs["sort"]:
                assert len(sort) == 2 and sort[1] in ("asc", "desc"), sort
        if "refreshInterval" in attrs:
            ri = attrs["refreshInterval"]
            assert type(ri["pause"]) is bool and type(ri["value"]) is int


# --- references -------------------------------------------------------------------------
def test_every_reference_resolves_in_the_same_file(objects: list[dict[str, Any]]) -> None:
    present = {(o["type"], o["id"]) for o in objects}
    for obj in objects:
        names = [r["name"] for r in obj["references"]]
        assert len(set(names)) == len(names), obj["id"]
        for ref in obj["references"]:
            assert set(ref) == {"name", "type", "id"}, ref
            assert (ref["type"], ref["id"]) in present, (obj["id"], ref)


def test_searches_and_visualizations_name_their_data_view(objects: list[dict[str, Any]]) -> None:
    for obj in of_type(objects, "search") + of_type(objects, "visualization"):
        source = search_source(obj)
        assert "index" not in source  # an id in the JSON would bypass the references
        ref_name = source["indexRefName"]
        assert ref_name == "kibanaSavedObjectMeta.searchSourceJSON.index"
        refs = [r for r in obj["references"] if r["name"] == ref_name]
        assert len(refs) == 1 and refs[0]["type"] == "index-pattern"
        assert obj["references"] == refs  # nothing unused
        assert source["filter"] == []
        assert set(source["query"]) == {"query", "language"}


def test_dashboard_panels(engine: str, objects: list[dict[str, Any]]) -> None:
    (board,) = of_type(objects, "dashboard")
    panels = json.loads(board["attributes"]["panelsJSON"])
    refs = {r["name"]: r for r in board["references"]}
    used = set()
    cells: set[tuple[int, int]] = set()
    for panel in panels:
        grid = panel["gridData"]
        assert set(grid) == {"x", "y", "w", "h", "i"} and grid["i"] == panel["panelIndex"]
        assert all(type(grid[k]) is int for k in "xywh")
        assert grid["x"] >= 0 and grid["w"] > 0 and grid["x"] + grid["w"] <= GRID_COLUMNS
        area = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not area & cells, f"panel {panel['panelIndex']} overlaps another"
        cells |= area
        assert "id" not in panel  # ids live in the references
        if engine == KIBANA:
            assert (8, 0, 0) <= semver(panel["version"]) <= KIBANA_VERSION
            name = f"{panel['panelIndex']}:{panel['panelRefName']}"
            assert panel["type"] == refs[name]["type"]
        else:
            # past the 7.3.0 panel migration, not past what OpenSearch Dashboards knows
            assert (7, 3, 0) <= semver(panel["version"]) <= (7, 10, 2)
            assert "type" not in panel  # the 7.0.0 migration's output: type in the ref
            name = panel["panelRefName"]
        assert refs[name]["type"] in ("visualization", "search")
        used.add(name)
    assert used == set(refs)
    panel_ids = [panel["panelIndex"] for panel in panels]
    assert len(set(panel_ids)) == len(panel_ids)
    # the issue's panels, and the failed documents next to them
    shown = {refs[n]["id"].split(".")[1] for n in used}
    assert shown == {
        "status-over-time",
        "failures-by-error-type",
        "stage-timings",
        "queue-throughput",
        "chunks-per-tenant",
        "failed-documents",
    }


# --- fields -----------------------------------------------------------------------------
def test_data_views_point_at_the_alias_and_its_status_index(
    engine: str, objects: list[dict[str, Any]]
) -> None:
    views = {o["id"]: o["attributes"] for o in of_type(objects, "index-pattern")}
    assert views["es-rag.chunks.{{alias}}"]["title"] == "{{alias}}"
    status = views["es-rag.status.{{alias}}"]
    assert status["title"] == "{{alias}}-status"
    assert view_fields(engine, status["title"])[status["timeFieldName"]] in DATES
    assert "timeFieldName" not in views["es-rag.chunks.{{alias}}"]


def test_query_fields_exist_and_fence_rows_are_excluded(
    engine: str, objects: list[dict[str, Any]]
) -> None:
    for obj in of_type(objects, "search") + of_type(objects, "visualization"):
        view = index_pattern_of(obj, objects)["attributes"]["title"]
        fields = view_fields(engine, view)
        found = clauses(query_of(obj))
        assert found, obj["id"]
        for field, value in found:
            assert fields.get(field) in SEARCHABLE, (obj["id"], field)
            if field == "status" and value != "*":
                assert value in STATUSES
            if field == "chunk_type":
                assert value in ("child", "parent")
        if view.endswith("-status"):
            # version fences share the status index: every view of it keeps outcome rows only
            assert ("kind", "status") in found, obj["id"]


def test_saved_search_columns_and_sort(engine: str, objects: list[dict[str, Any]]) -> None:
    for obj in of_type(objects, "search"):
        view = index_pattern_of(obj, objects)["attributes"]["title"]
        fields = view_fields(engine, view)
        for column in obj["attributes"]["columns"]:
            assert column in fields, (obj["id"], column)
        for field, _ in obj["attributes"]["sort"]:
            assert fields.get(field) in AGGREGATABLE, (obj["id"], field, fields.get(field))


def test_visualization_aggs_use_fields_they_can(engine: str, objects: list[dict[str, Any]]) -> None:
    for obj in of_type(objects, "visualization"):
        state = vis_state(obj)
        assert state["title"] == obj["attributes"]["title"]
        assert state["type"] in VIS_SCHEMAS, state["type"]
        fields = view_fields(engine, index_pattern_of(obj, objects)["attributes"]["title"])
        aggs = state["aggs"]
        ids = [a["id"] for a in aggs]
        assert len(set(ids)) == len(ids)
        metrics = {a["id"] for a in aggs if a["schema"] == "metric"}
        assert metrics
        for a in aggs:
            assert set(a) == {"id", "enabled", "type", "schema", "params"} and a["enabled"] is True
            assert a["schema"] in VIS_SCHEMAS[state["type"]], (obj["id"], a["schema"])
            if a["type"] == "count":
                assert "field" not in a["params"]
                continue
            field = a["params"]["field"]
            assert fields.get(field) in AGG_FIELD_TYPES[a["type"]], (obj["id"], a["type"], field)
            if a["type"] == "terms":
                assert a["params"]["orderBy"] in metrics | {"_key"}
            if a["type"] == "percentiles":
                assert a["params"]["percents"] == [50, 95]
        if state["type"] in ("histogram", "line"):
            params = state["params"]
            assert params["type"] == state["type"]
            axes = {ax["id"] for ax in params["valueAxes"]}
            assert {s["data"]["id"] for s in params["seriesParams"]} == metrics
            assert all(s["valueAxis"] in axes for s in params["seriesParams"])


def test_stage_timings_cover_every_stage(objects: list[dict[str, Any]]) -> None:
    state = vis_state(by_name(objects, "stage-timings"))
    timed = [a["params"]["field"] for a in state["aggs"] if a["type"] == "percentiles"]
    stages = view_fields(KIBANA, "x-status")
    assert sorted(timed) == sorted(f for f in stages if f.startswith("timings_ms."))


# --- rendering --------------------------------------------------------------------------
def test_render_fills_every_placeholder(engine: str) -> None:
    rendered = dashboards.render(engine, alias="kb-prod", tenant="acme")
    text = dashboards.to_ndjson(rendered).decode("utf-8")
    assert not re.search(r"\{\{\w+\}\}", text)
    views = {o["attributes"]["title"] for o in of_type(rendered, "index-pattern")}
    assert views == {"kb-prod", "kb-prod-status"}
    assert all(o["id"].endswith(".kb-prod") for o in rendered)
    # embedded JSON is still JSON after the fill
    for obj in rendered:
        for key in dashboards.EMBEDDED_JSON:
            if key in obj["attributes"]:
                json.loads(obj["attributes"][key])
    assert query_of(by_name_rendered(rendered, "tenant-documents")).endswith('tenant_id:"acme"')


def by_name_rendered(objects: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(o for o in objects if o["id"].startswith(f"es-rag.{name}."))


def test_two_aliases_never_share_an_id(engine: str) -> None:
    a = {(o["type"], o["id"]) for o in dashboards.render(engine, alias="kb-a")}
    b = {(o["type"], o["id"]) for o in dashboards.render(engine, alias="kb-b")}
    assert not a & b


def test_default_tenant_is_every_tenant(engine: str) -> None:
    query = query_of(
        by_name_rendered(dashboards.render(engine, alias="es-rag"), "tenant-documents")
    )
    assert query == "chunk_type:child AND ordinal:0 AND tenant_id:*"


def test_tenant_is_one_escaped_lucene_term(engine: str) -> None:
    rendered = dashboards.render(engine, alias="es-rag", tenant='we "quote" \\ things')
    query = query_of(by_name_rendered(rendered, "tenant-documents"))
    assert query.endswith('tenant_id:"we \\"quote\\" \\\\ things"')
    assert clauses(query)[-1] == ("tenant_id", '"we \\"quote\\" \\\\ things"')


def test_placeholders_are_filled_in_one_pass() -> None:
    """An alias is never read for placeholders itself (and braces are refused anyway)."""
    with pytest.raises(ConfigurationError):
        dashboards.render(KIBANA, alias="{{tenant}}")
    rendered = dashboards.render(KIBANA, alias="es-rag", tenant="{{alias}}")
    assert query_of(by_name_rendered(rendered, "tenant-documents")).endswith('"{{alias}}"')


@pytest.mark.parametrize(
    "alias",
    [
        "",
        "Upper",
        "a*",
        "a b",
        "-a",
        "_a",
        "+a",
        "a:b",
        "a/b",
        "a,b",
        "a#b",
        ".",
        "..",
        'a"b',
        "a\tb",
        "x" * 256,
    ],
)
def test_bad_alias_is_refused(alias: str) -> None:
    with pytest.raises(ConfigurationError):
        dashboards.render(KIBANA, alias=alias)


@pytest.mark.parametrize("alias", ["es-rag", "kb.prod", "kb_2", "a+b", "é-docs"])
def test_good_alias_is_accepted(alias: str) -> None:
    assert dashboards.render(KIBANA, alias=alias)[0]["attributes"]["title"] == alias


def test_unknown_engine_is_refused() -> None:
    with pytest.raises(ConfigurationError):
        dashboards.render("grafana", alias="es-rag")


# --- the install request ----------------------------------------------------------------
class FakeDashboards:
    """A local HTTP server that records every request and answers like Kibana (or
    OpenSearch Dashboards): it keeps the imported objects by (type, id), refuses an
    existing one without ``overwrite=true`` (``conflict``), and names itself in a header."""

    def __init__(self, product: str = KIBANA) -> None:
        self.product = product
        self.requests: list[dict[str, Any]] = []
        self.store: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.script: list[tuple[int, Any]] = []  # canned answers to the next imports
        self.not_ready = 0  # answer this many requests with 503 first
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if outer.product:
                    self.send_header(dashboards.NAME_HEADERS[outer.product], "fake")
                self.end_headers()
                self.wfile.write(data)

            def _record(self) -> dict[str, Any]:
                length = int(self.headers.get("Content-Length") or 0)
                parts = urlsplit(self.path)
                seen = {
                    "method": self.command,
                    "path": parts.path,
                    "query": parse_qs(parts.query),
                    "headers": {k.lower(): v for k, v in self.headers.items()},
                    "body": self.rfile.read(length),
                }
                outer.requests.append(seen)
                return seen

            def do_GET(self) -> None:
                self._record()
                if outer.not_ready:
                    outer.not_ready -= 1
                    self._answer(503, {"message": "Kibana server is not ready yet"})
                    return
                self._answer(200, {"status": {"overall": {"level": "available"}}})

            def do_POST(self) -> None:
                seen = self._record()
                if outer.not_ready:
                    outer.not_ready -= 1
                    self._answer(503, {"message": "Kibana server is not ready yet"})
                    return
                if outer.script:
                    self._answer(*outer.script.pop(0))
                    return
                self._answer(200, outer.import_(seen))

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()

    def import_(self, seen: dict[str, Any]) -> dict[str, Any]:
        files = multipart_files(seen)
        objects = [json.loads(line) for line in files["file"][1].decode().splitlines()]
        overwrite = seen["query"].get("overwrite") == ["true"]
        space = seen["path"].split("/api/")[0] or seen["headers"].get("securitytenant", "")
        results, errors = [], []
        for obj in objects:
            key = (space, obj["type"], obj["id"])
            if key in self.store and not overwrite:
                errors.append({"type": obj["type"], "id": obj["id"], "error": {"type": "conflict"}})
                continue
            results.append({"type": obj["type"], "id": obj["id"], "overwrite": key in self.store})
            self.store[key] = obj
        return {
            "success": not errors,
            "successCount": len(results),
            "successResults": results,
            **({"errors": errors} if errors else {}),
        }

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def multipart_files(seen: dict[str, Any]) -> dict[str, tuple[str, bytes, str]]:
    """name → (filename, content, content type) of a multipart/form-data body."""
    ctype = seen["headers"]["content-type"]
    assert ctype.startswith("multipart/form-data; boundary="), ctype
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        f"Content-Type: {ctype}\r\n\r\n".encode() + seen["body"]
    )
    assert message.is_multipart()
    out: dict[str, tuple[str, bytes, str]] = {}
    for part in message.iter_parts():
        assert part.get_content_disposition() == "form-data"
        name = part.get_param("name", header="content-disposition")
        filename, payload = part.get_filename(), part.get_payload(decode=True)
        assert isinstance(name, str) and isinstance(filename, str) and isinstance(payload, bytes)
        out[name] = (filename, payload, part.get_content_type())
    return out


@pytest.fixture
def fake() -> Iterator[FakeDashboards]:
    server = FakeDashboards()
    yield server
    server.close()


def imports(server: FakeDashboards) -> list[dict[str, Any]]:
    return [r for r in server.requests if r["method"] == "POST"]


@pytest.mark.parametrize(
    ("engine", "space", "path", "tenant_header"),
    [
        (KIBANA, None, "/api/saved_objects/_import", None),
        (KIBANA, "default", "/api/saved_objects/_import", None),
        (KIBANA, "ops-team", "/s/ops-team/api/saved_objects/_import", None),
        (OPENSEARCH_DASHBOARDS, None, "/api/saved_objects/_import", None),
        (OPENSEARCH_DASHBOARDS, "global", "/api/saved_objects/_import", "global"),
    ],
)
def test_install_sends_the_documented_import_request(
    fake: FakeDashboards, engine: str, space: str | None, path: str, tenant_header: str | None
) -> None:
    fake.product = engine
    out = dashboards.install(fake.url, alias="kb-prod", engine=engine, space=space)
    (seen,) = fake.requests  # an explicit engine asks nothing else
    assert seen["method"] == "POST"
    assert seen["path"] == path
    assert seen["query"] == {"overwrite": ["true"]}
    xsrf, other = (
        dashboards.XSRF_HEADERS[engine],
        dashboards.XSRF_HEADERS[
            KIBANA if engine == OPENSEARCH_DASHBOARDS else OPENSEARCH_DASHBOARDS
        ],
    )
    assert seen["headers"][xsrf] == "true" and other not in seen["headers"]
    assert seen["headers"].get("securitytenant") == tenant_header
    assert "authorization" not in seen["headers"]
    files = multipart_files(seen)
    assert set(files) == {"file"}
    filename, content, ctype = files["file"]
    assert filename.endswith(".ndjson")  # both products refuse other extensions
    assert ctype == "application/ndjson"
    assert content == dashboards.to_ndjson(dashboards.render(engine, alias="kb-prod"))
    assert out == {
        "engine": engine,
        "url": fake.url,
        "space": space,
        "alias": "kb-prod",
        "success": True,
        "successCount": 11,
        "objects": 11,
        "errors": [],
    }


def test_second_install_overwrites_the_same_objects(fake: FakeDashboards) -> None:
    first = dashboards.install(fake.url, alias="es-rag", engine=KIBANA)
    stored = dict(fake.store)
    second = dashboards.install(fake.url, alias="es-rag", engine=KIBANA)
    assert first["success"] and second["success"] and second["successCount"] == 11
    assert fake.store == stored and len(stored) == 11  # replaced, not copied
    one, two = imports(fake)
    assert one["body"].count(b"\n") == two["body"].count(b"\n")
    assert multipart_files(one)["file"][1] == multipart_files(two)["file"][1]


def test_a_second_alias_adds_its_own_objects(fake: FakeDashboards) -> None:
    dashboards.install(fake.url, alias="kb-a", engine=KIBANA)
    dashboards.install(fake.url, alias="kb-b", engine=KIBANA)
    assert len(fake.store) == 22


@pytest.mark.parametrize(
    ("kwargs", "header"),
    [
        ({"api_key": "c2VjcmV0"}, "ApiKey c2VjcmV0"),
        ({"user": "elastic", "password": "pw"}, "Basic ZWxhc3RpYzpwdw=="),
    ],
)
def test_credentials(fake: FakeDashboards, kwargs: dict[str, Any], header: str) -> None:
    dashboards.install(fake.url, alias="es-rag", engine=KIBANA, **kwargs)
    assert imports(fake)[0]["headers"]["authorization"] == header


@pytest.mark.parametrize(
    "kwargs", [{"api_key": "k", "user": "u", "password": "p"}, {"user": "u"}, {"password": "p"}]
)
def test_inconsistent_credentials_are_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        dashboards.install("http://127.0.0.1:9", alias="es-rag", engine=KIBANA, **kwargs)


@pytest.mark.parametrize("product", ENGINES)
def test_auto_asks_the_server_which_product_it_is(fake: FakeDashboards, product: str) -> None:
    fake.product = product
    out = dashboards.install(fake.url, alias="es-rag", user="u", password="p")
    probe, post = fake.requests
    assert (probe["method"], probe["path"]) == ("GET", "/api/status")
    assert probe["headers"]["authorization"].startswith("Basic ")
    assert out["engine"] == product and dashboards.XSRF_HEADERS[product] in post["headers"]


def test_auto_refuses_a_server_that_is_neither(fake: FakeDashboards) -> None:
    fake.product = ""
    with pytest.raises(DashboardsError, match="pass --engine"):
        dashboards.install(fake.url, alias="es-rag")
    assert not imports(fake)


def test_partial_import_is_reported(fake: FakeDashboards) -> None:
    fake.script.append(
        (
            200,
            {
                "success": False,
                "successCount": 10,
                "errors": [
                    {
                        "type": "visualization",
                        "id": "es-rag.stage-timings.es-rag",
                        "meta": {"title": "Stage timings"},
                        "error": {"type": "missing_references"},
                    }
                ],
            },
        )
    )
    out = dashboards.install(fake.url, alias="es-rag", engine=KIBANA)
    assert out["success"] is False and out["successCount"] == 10
    assert out["errors"] == [
        {
            "type": "visualization",
            "id": "es-rag.stage-timings.es-rag",
            "title": "Stage timings",
            "error": "missing_references",
        }
    ]


def test_http_error_raises_with_the_server_message(fake: FakeDashboards) -> None:
    fake.script.append((401, {"statusCode": 401, "message": "Unauthorized"}))
    with pytest.raises(DashboardsError, match="HTTP 401: Unauthorized"):
        dashboards.install(fake.url, alias="es-rag", engine=KIBANA)


def test_wait_rides_out_a_server_that_is_starting(
    fake: FakeDashboards, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dashboards, "RETRY_DELAY_S", 0.05)
    fake.not_ready = 2
    with pytest.raises(DashboardsError, match="HTTP 503"):
        dashboards.install(fake.url, alias="es-rag", engine=KIBANA)
    fake.not_ready = 2
    out = dashboards.install(fake.url, alias="es-rag", wait_s=30)
    assert out["success"] and out["engine"] == KIBANA


def test_unreachable_server_raises() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(DashboardsError, match="cannot reach"):
        dashboards.install(url, alias="es-rag", engine=KIBANA)


def test_url_must_be_http() -> None:
    with pytest.raises(ConfigurationError):
        dashboards.install("kibana:5601", alias="es-rag", engine=KIBANA)


@pytest.mark.parametrize("space", ["Ops", "a b", "ops/x", ""])
def test_bad_kibana_space_is_refused(space: str) -> None:
    with pytest.raises(ConfigurationError):
        dashboards.import_request("http://k:5601", engine=KIBANA, content=b"", space=space)


# --- the command ------------------------------------------------------------------------
def cli(*args: str, env: dict[str, str] | None = None) -> Any:
    runner = CliRunner()
    return runner.invoke(app, list(args), env={"ES_RAG_INDEX": "kb-cli", **(env or {})})


def test_cli_install_prints_the_summary(fake: FakeDashboards) -> None:
    result = cli("dashboards", "install", "--url", fake.url, "--space", "ops", "--tenant", "Acme")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["alias"] == "kb-cli" and out["success"] and out["engine"] == KIBANA
    (post,) = imports(fake)
    assert post["path"] == "/s/ops/api/saved_objects/_import"
    sent = [json.loads(line) for line in multipart_files(post)["file"][1].splitlines()]
    # the tenant as rows store it (normalised), as one Lucene term
    assert query_of(by_name_rendered(sent, "tenant-documents")).endswith('tenant_id:"acme"')


def test_cli_reads_url_and_credentials_from_the_environment(fake: FakeDashboards) -> None:
    env = {"ES_RAG_KIBANA_URL": fake.url, "ES_RAG_KIBANA_API_KEY": "a2V5"}
    result = cli("--index", "kb-flag", "dashboards", "install", "--engine", "kibana", env=env)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["alias"] == "kb-flag"
    assert imports(fake)[0]["headers"]["authorization"] == "ApiKey a2V5"


def test_cli_partial_import_exits_1_with_one_line(fake: FakeDashboards) -> None:
    fake.script.append(
        (
            200,
            {
                "success": False,
                "successCount": 0,
                "errors": [{"type": "dashboard", "id": "x", "error": {"type": "unsupported_type"}}],
            },
        )
    )
    result = cli("dashboards", "install", "--url", fake.url, "--engine", "kibana")
    assert result.exit_code == 1
    assert json.loads(result.stdout)["success"] is False
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "1 of 11 saved objects not imported" in lines[0], result.stderr


def test_cli_unreachable_is_one_line() -> None:
    result = cli("dashboards", "install", "--url", f"http://127.0.0.1:{free_port()}")
    assert result.exit_code == 1 and not result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot reach" in lines[0]


def test_cli_render_prints_the_ndjson() -> None:
    result = cli("dashboards", "render", "--engine", "opensearch-dashboards", "--alias", "kb")
    assert result.exit_code == 0, result.output
    rendered = dashboards.render(OPENSEARCH_DASHBOARDS, alias="kb")
    assert result.stdout.encode() == dashboards.to_ndjson(rendered)


def _dist(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirements_closure(roots: list[str]) -> set[str]:
    """The distributions ``roots`` install here (extras left out, markers that do not
    apply to this Python skipped: their distribution is not installed)."""
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if _dist(name) in seen:
            continue
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        seen.add(_dist(name))
        todo += [
            re.split(r"[ ;<>=!~\[(]", r, maxsplit=1)[0] for r in requires if "extra ==" not in r
        ]
    return seen


def test_the_command_needs_only_the_setup_jobs_packages() -> None:
    """The compose file's setup jobs install es-rag with --no-deps plus typer, httpx,
    pydantic and pydantic-settings (no torch, no parsers, no search clients): importing the
    CLI and the dashboards module must need nothing else."""
    code = (
        "import sys, json\n"
        "before = set(sys.modules)\n"
        "import es_rag.cli, es_rag.dashboards, httpx\n"
        "from importlib import metadata\n"
        "dists = metadata.packages_distributions()\n"
        "new = {m.split('.')[0] for m in set(sys.modules) - before}\n"
        "print(json.dumps(sorted({d for m in new for d in dists.get(m, [])})))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    used = {_dist(d) for d in json.loads(proc.stdout)} - {"es-rag"}
    allowed = _requirements_closure(["typer", "httpx", "pydantic", "pydantic-settings"])
    allowed.add("click")  # httpx imports it when installed (its optional `cli` extra)
    assert "httpx" in used and "typer" in used
    assert used <= allowed, used - allowed
