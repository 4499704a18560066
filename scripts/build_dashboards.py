#!/usr/bin/env python3
"""Write ``dashboards/kibana.ndjson`` and ``dashboards/opensearch-dashboards.ndjson``.

    python scripts/build_dashboards.py          # rewrite both files
    python scripts/build_dashboards.py --check  # exit 1 if a file differs from this script

The saved objects es-rag ships (two data views, three saved searches, five visualizations
and the "es-rag ingestion" dashboard) are defined once, here, and written in each
product's import format. The NDJSON files are what `es-rag dashboards install` sends and
what an operator may import by hand (Stack Management > Saved objects > Import); this
script is only how they are kept right: a visualization's ``visState`` and a dashboard's
``panelsJSON`` are JSON inside JSON strings, which nobody should edit by hand.
``tests/unit/test_dashboards.py`` fails when a file differs from what this script writes.

Formats and why:

- Visualizations are aggregation-based (``visualization`` with ``visState``), not Lens:
  OpenSearch Dashboards has no Lens, so one definition serves both products, and its
  shape (aggs with ``type``, ``schema`` and ``params.field``) is stable and checkable field
  by field against the mappings. The ``visState`` is written in the 7.10 format that
  OpenSearch Dashboards 3.x stores natively; the Kibana file declares it as such
  (``typeMigrationVersion: 7.10.0``) and Kibana's own migrations (7.11 … 8.5) bring it to
  the current format on import, exactly as they do for Kibana's bundled sample data.
  Kibana 9.2 still renders and edits aggregation-based charts, and offers "Convert to Lens".
- Every other object is in the format its product's own sample data uses: Kibana's with
  ``coreMigrationVersion``/``typeMigrationVersion`` (index-pattern 7.11.0, search 7.9.3,
  dashboard 8.7.0 with ``<panelIndex>:panel_<panelIndex>`` references), OpenSearch
  Dashboards' with ``migrationVersion`` at each type's last migration (7.6.0, 7.9.3,
  7.10.0, 7.9.3). Declaring the version a document is written in is what keeps an import
  from re-running migrations that would misread it.
- Queries use Lucene syntax (``language: lucene``): both products send it to the server as
  a ``query_string`` query, so the integration test runs the very same strings.

Placeholders, filled in by ``es_rag.dashboards.render``: ``{{alias}}`` (the index alias;
it is in every id, so two aliases' objects coexist in one Kibana space) and ``{{tenant}}``
(the tenant of the "documents of a tenant" search: ``*`` unless one is given).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "dashboards"

ALIAS = "{{alias}}"
TENANT = "{{tenant}}"
KIBANA = "kibana"
OSD = "opensearch-dashboards"
FILES = {KIBANA: "kibana.ndjson", OSD: "opensearch-dashboards.ndjson"}

# Kibana: the core format of the envelope, and each type's format (its last migration
# whose output these objects match; see the module docstring).
KIBANA_CORE_VERSION = "8.8.0"
KIBANA_TYPE_VERSION = {
    "index-pattern": "7.11.0",
    "search": "7.9.3",
    "visualization": "7.10.0",
    "dashboard": "8.7.0",
}
KIBANA_PANEL_VERSION = "8.8.0"
# OpenSearch Dashboards 3.x: each type's last migration (it has no newer ones).
OSD_TYPE_VERSION = {
    "index-pattern": "7.6.0",
    "search": "7.9.3",
    "visualization": "7.10.0",
    "dashboard": "7.9.3",
}
OSD_PANEL_VERSION = "7.10.2"

INDEX_REF = "kibanaSavedObjectMeta.searchSourceJSON.index"


def oid(name: str) -> str:
    """Every id names its alias: ``es-rag.<name>.<alias>`` (names have no dots)."""
    return f"es-rag.{name}.{ALIAS}"


CHUNKS_VIEW = oid("chunks")
STATUS_VIEW = oid("status")


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def search_source(query: str, *, index: bool = True, **extra: Any) -> str:
    body: dict[str, Any] = {"query": {"query": query, "language": "lucene"}, "filter": []}
    body.update(extra)
    if index:
        body["indexRefName"] = INDEX_REF
    return dumps(body)


def index_ref(view: str) -> list[dict[str, str]]:
    return [{"name": INDEX_REF, "type": "index-pattern", "id": view}]


# --- data views -------------------------------------------------------------------------
def data_views(engine: str) -> list[dict[str, Any]]:
    chunks: dict[str, Any] = {"title": ALIAS, "fields": "[]"}
    status: dict[str, Any] = {
        "title": f"{ALIAS}-status",
        "timeFieldName": "updated_at",
        "fields": "[]",
    }
    if engine == KIBANA:
        # name: what Kibana shows (OpenSearch Dashboards shows the title, the pattern);
        # allowNoIndex: the status index appears with the first queued document.
        chunks.update(name=f"es-rag chunks ({ALIAS})", allowNoIndex=True)
        status.update(name=f"es-rag ingest status ({ALIAS})", allowNoIndex=True)
    # The chunk view has no time field on purpose: chunks are the knowledge base's
    # content, not events, and a time filter would hide documents indexed long ago.
    return [
        {"id": CHUNKS_VIEW, "type": "index-pattern", "attributes": chunks, "references": []},
        {"id": STATUS_VIEW, "type": "index-pattern", "attributes": status, "references": []},
    ]


# --- saved searches ---------------------------------------------------------------------
# Status rows are `kind: status`; version fences share the index as `kind: fence`.
SEARCHES: list[dict[str, Any]] = [
    {
        "name": "failed-documents",
        "view": STATUS_VIEW,
        "title": f"es-rag: failed documents ({ALIAS})",
        "description": "Every document whose latest ingest failed, newest first, with its "
        "error class and message. Fix the cause, then `es-rag requeue --failed`.",
        "query": "kind:status AND status:failed",
        "columns": [
            "tenant_id",
            "doc_id",
            "error_type",
            "error",
            "reason",
            "attempts",
            "retries",
            "worker",
            "finished_at",
        ],
        "sort": [["updated_at", "desc"]],
    },
    {
        "name": "tenant-documents",
        "view": CHUNKS_VIEW,
        "title": f"es-rag: documents of a tenant ({ALIAS})",
        "description": "One row per indexed document (its first searchable chunk) of the "
        "tenant in the query, by document id. Change tenant_id:… to see another tenant.",
        "query": f"chunk_type:child AND ordinal:0 AND tenant_id:{TENANT}",
        "columns": [
            "tenant_id",
            "doc_id",
            "title",
            "source_uri",
            "mime_type",
            "chunk_count",
            "visibility",
            "indexed_at",
        ],
        "sort": [["tenant_id", "asc"], ["doc_id", "asc"]],
    },
    {
        "name": "document-chunks",
        "view": CHUNKS_VIEW,
        "title": f"es-rag: chunks of a document, in order ({ALIAS})",
        "description": "The searchable chunks of each document in reading order. Replace "
        'doc_id:* with doc_id:"<the document id>" to read one document.',
        "query": "chunk_type:child AND doc_id:*",
        "columns": [
            "tenant_id",
            "doc_id",
            "ordinal",
            "title_path",
            "page_start",
            "page_end",
            "content",
        ],
        "sort": [["tenant_id", "asc"], ["doc_id", "asc"], ["ordinal", "asc"]],
    },
]


def saved_searches() -> list[dict[str, Any]]:
    out = []
    for s in SEARCHES:
        attributes = {
            "title": s["title"],
            "description": s["description"],
            "hits": 0,
            "columns": s["columns"],
            "sort": s["sort"],
            "version": 1,
            "kibanaSavedObjectMeta": {
                "searchSourceJSON": search_source(s["query"], highlightAll=True, version=True)
            },
        }
        out.append(
            {
                "id": oid(s["name"]),
                "type": "search",
                "attributes": attributes,
                "references": index_ref(s["view"]),
            }
        )
    return out


# --- visualizations ---------------------------------------------------------------------
def agg(agg_id: str, agg_type: str, schema: str, **params: Any) -> dict[str, Any]:
    return {"id": agg_id, "enabled": True, "type": agg_type, "schema": schema, "params": params}


def count(agg_id: str = "1", label: str = "Documents") -> dict[str, Any]:
    return agg(agg_id, "count", "metric", customLabel=label)


def date_histogram(agg_id: str, field: str, schema: str = "segment") -> dict[str, Any]:
    return agg(
        agg_id,
        "date_histogram",
        schema,
        field=field,
        useNormalizedEsInterval=True,
        scaleMetricValues=False,
        interval="auto",
        drop_partials=False,
        min_doc_count=1,
        extended_bounds={},
    )


def terms(agg_id: str, field: str, schema: str, label: str, size: int = 10) -> dict[str, Any]:
    return agg(
        agg_id,
        "terms",
        schema,
        field=field,
        orderBy="1",
        order="desc",
        size=size,
        otherBucket=False,
        otherBucketLabel="Other",
        missingBucket=False,
        missingBucketLabel="Missing",
        customLabel=label,
    )


def xy(
    title: str, chart: str, aggs: list[dict[str, Any]], *, y_title: str, mode: str
) -> dict[str, Any]:
    """A vertical bar (``histogram``) or ``line`` chart in the 7.10 ``visState`` format."""
    metrics = [a for a in aggs if a["schema"] == "metric"]
    return {
        "title": title,
        "type": chart,
        "aggs": aggs,
        "params": {
            "type": chart,
            "grid": {"categoryLines": False},
            "categoryAxes": [
                {
                    "id": "CategoryAxis-1",
                    "type": "category",
                    "position": "bottom",
                    "show": True,
                    "style": {},
                    "scale": {"type": "linear"},
                    "labels": {"show": True, "filter": True, "truncate": 100},
                    "title": {},
                }
            ],
            "valueAxes": [
                {
                    "id": "ValueAxis-1",
                    "name": "LeftAxis-1",
                    "type": "value",
                    "position": "left",
                    "show": True,
                    "style": {},
                    "scale": {"type": "linear", "mode": "normal"},
                    "labels": {"show": True, "rotate": 0, "filter": False, "truncate": 100},
                    "title": {"text": y_title},
                }
            ],
            "seriesParams": [
                {
                    "show": True,
                    "type": "histogram" if chart == "histogram" else "line",
                    "mode": mode,
                    "data": {"label": m["params"].get("customLabel", m["type"]), "id": m["id"]},
                    "valueAxis": "ValueAxis-1",
                    "drawLinesBetweenPoints": True,
                    "lineWidth": 2,
                    "interpolate": "linear",
                    "showCircles": True,
                }
                for m in metrics
            ],
            "addTooltip": True,
            "addLegend": True,
            "legendPosition": "right",
            "times": [],
            "addTimeMarker": False,
            "labels": {"show": False},
            "thresholdLine": {
                "show": False,
                "value": 10,
                "width": 1,
                "style": "full",
                "color": "#E7664C",
            },
        },
    }


def pie(title: str, aggs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "title": title,
        "type": "pie",
        "aggs": aggs,
        "params": {
            "type": "pie",
            "addTooltip": True,
            "addLegend": True,
            "legendPosition": "right",
            "isDonut": True,
            "labels": {"show": True, "values": True, "last_level": True, "truncate": 100},
        },
    }


STAGES = ("parse", "chunk", "embed", "index", "total")

VISUALIZATIONS: list[dict[str, Any]] = [
    {
        "name": "status-over-time",
        "view": STATUS_VIEW,
        "query": "kind:status",
        "description": "Documents by their latest status, bucketed by when it was recorded.",
        "vis": xy(
            "Documents by status over time",
            "histogram",
            [
                count(),
                date_histogram("2", "updated_at"),
                terms("3", "status", "group", "Status", size=5),
            ],
            y_title="Documents",
            mode="stacked",
        ),
    },
    {
        "name": "failures-by-error-type",
        "view": STATUS_VIEW,
        "query": "kind:status AND status:failed",
        "description": "Failed documents by error class (es_rag.errors): InputError "
        "subclasses are the files themselves, the others the system.",
        "vis": pie(
            "Failures by error type",
            [
                count(label="Failed documents"),
                terms("2", "error_type", "segment", "Error type", 20),
            ],
        ),
    },
    {
        "name": "stage-timings",
        "view": STATUS_VIEW,
        "query": "kind:status AND _exists_:timings_ms.total",
        "description": "Median and 95th percentile of each ingest stage, in milliseconds.",
        "vis": xy(
            "Stage timings p50 / p95 (ms)",
            "line",
            [
                *(
                    agg(
                        str(n),
                        "percentiles",
                        "metric",
                        field=f"timings_ms.{stage}",
                        percents=[50, 95],
                        customLabel=stage,
                    )
                    for n, stage in enumerate(STAGES, start=1)
                ),
                date_histogram(str(len(STAGES) + 1), "updated_at"),
            ],
            y_title="ms",
            mode="normal",
        ),
    },
    {
        "name": "queue-throughput",
        "view": STATUS_VIEW,
        "query": "kind:status AND _exists_:finished_at",
        "description": "Documents that finished (indexed, skipped or failed) per interval.",
        "vis": xy(
            "Queue throughput (documents finished)",
            "histogram",
            [
                count(),
                date_histogram("2", "finished_at"),
                terms("3", "status", "group", "Outcome", size=5),
            ],
            y_title="Documents",
            mode="stacked",
        ),
    },
    {
        "name": "chunks-per-tenant",
        "view": CHUNKS_VIEW,
        "query": "chunk_type:child",
        "description": "Searchable chunks per tenant (the whole index: no time filter).",
        "vis": xy(
            "Chunks per tenant",
            "histogram",
            [count(label="Chunks"), terms("2", "tenant_id", "segment", "Tenant", size=20)],
            y_title="Chunks",
            mode="stacked",
        ),
    },
]


def visualizations() -> list[dict[str, Any]]:
    out = []
    for v in VISUALIZATIONS:
        attributes = {
            "title": v["vis"]["title"],
            "description": v["description"],
            "visState": dumps(v["vis"]),
            "uiStateJSON": "{}",
            "version": 1,
            "kibanaSavedObjectMeta": {"searchSourceJSON": search_source(v["query"])},
        }
        out.append(
            {
                "id": oid(v["name"]),
                "type": "visualization",
                "attributes": attributes,
                "references": index_ref(v["view"]),
            }
        )
    return out


# --- the dashboard ----------------------------------------------------------------------
# (panel, type, x, y, w, h) on the 48-column grid.
PANELS = [
    ("status-over-time", "visualization", 0, 0, 24, 15),
    ("failures-by-error-type", "visualization", 24, 0, 24, 15),
    ("stage-timings", "visualization", 0, 15, 24, 15),
    ("queue-throughput", "visualization", 24, 15, 24, 15),
    ("chunks-per-tenant", "visualization", 0, 30, 16, 15),
    ("failed-documents", "search", 16, 30, 32, 15),
]


def dashboard(engine: str) -> dict[str, Any]:
    panels = []
    references = []
    for n, (name, kind, x, y, w, h) in enumerate(PANELS, start=1):
        index = str(n)
        panel: dict[str, Any] = {
            "version": KIBANA_PANEL_VERSION if engine == KIBANA else OSD_PANEL_VERSION,
            "gridData": {"x": x, "y": y, "w": w, "h": h, "i": index},
            "panelIndex": index,
            "embeddableConfig": {},
            "panelRefName": f"panel_{n - 1}",
        }
        ref_name = panel["panelRefName"]
        if engine == KIBANA:
            # Kibana 8+ keeps the panel's type and prefixes its reference with its index.
            panel.update(
                type=kind, embeddableConfig={"enhancements": {}}, panelRefName=f"panel_{index}"
            )
            ref_name = f"{index}:panel_{index}"
        panels.append(panel)
        references.append({"name": ref_name, "type": kind, "id": oid(name)})
    options = {"useMargins": True, "hidePanelTitles": False}
    if engine == KIBANA:
        options.update(syncColors=False, syncCursor=True, syncTooltips=False)
    attributes = {
        "title": f"es-rag ingestion ({ALIAS})",
        "description": "Ingest outcomes, failures, stage timings, queue throughput and "
        f"chunks per tenant of the es-rag index {ALIAS}.",
        "panelsJSON": dumps(panels),
        "optionsJSON": dumps(options),
        "version": 1,
        "timeRestore": True,
        "timeFrom": "now-7d",
        "timeTo": "now",
        "refreshInterval": {"pause": False, "value": 60000},
        "kibanaSavedObjectMeta": {"searchSourceJSON": search_source("", index=False)},
    }
    if engine == OSD:
        attributes["hits"] = 0
    return {
        "id": oid("ingestion"),
        "type": "dashboard",
        "attributes": attributes,
        "references": references,
    }


# --- files ------------------------------------------------------------------------------
def objects(engine: str) -> list[dict[str, Any]]:
    """Every saved object of ``engine``, dependencies first, in its import format."""
    out = [*data_views(engine), *saved_searches(), *visualizations(), dashboard(engine)]
    for obj in out:
        if engine == KIBANA:
            obj["coreMigrationVersion"] = KIBANA_CORE_VERSION
            obj["typeMigrationVersion"] = KIBANA_TYPE_VERSION[obj["type"]]
            obj["managed"] = False
        else:
            obj["migrationVersion"] = {obj["type"]: OSD_TYPE_VERSION[obj["type"]]}
    return out


def build() -> dict[str, str]:
    """File name → NDJSON text (one object per line, a newline after each)."""
    return {FILES[e]: "".join(dumps(o) + "\n" for o in objects(e)) for e in (KIBANA, OSD)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only compare, write nothing")
    args = parser.parse_args()
    stale = []
    for name, text in build().items():
        path = OUT / name
        if path.is_file() and path.read_text(encoding="utf-8") == text:
            continue
        stale.append(name)
        if not args.check:
            OUT.mkdir(exist_ok=True)
            path.write_text(text, encoding="utf-8")
    if args.check and stale:
        print(f"out of date: {', '.join(stale)} (run scripts/build_dashboards.py)")
        return 1
    print(json.dumps({"written" if not args.check else "stale": stale}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
