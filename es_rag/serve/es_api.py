"""An Elasticsearch-compatible search surface on ``es-rag serve``.

Frontends built for Elasticsearch (Elastic's Search UI, apps on the official clients) point
at the service instead of the cluster and get es-rag's hybrid ranking under the caller's
ACL, without changing their code beyond the URL and the API key:

- ``GET|HEAD /``, ``/{alias}/_search``, ``/_msearch`` and ``/{alias}/_msearch``,
  ``/{alias}/_count``, ``/{alias}/_mapping``, ``/{alias}/_field_caps``, answering in
  Elasticsearch's shapes, status codes and error bodies, with ``X-Elastic-Product``;
- ``{alias}`` is the alias the service serves, and only for a credential that may read it:
  any other name (another index, a concrete generation, a wildcard that matches nothing the
  key may read) is 404 ``index_not_found_exception``, as if it did not exist.

What a body means is es_rag.serve.dsl's job. With a question, the hits are es-rag's fused
candidates (the top ``rank_window_size`` of its hybrid search, filters and ACL inside both
retrievers): ``hits.total`` counts them, ``from``/``size`` page through them (deeper is
refused), a field ``sort`` orders them, and aggregations count them (before
``post_filter``, as Elasticsearch does). Without a question the request is a filtered browse
run natively. Every body sent on goes through the ACL guard.
"""

from __future__ import annotations

import fnmatch
import json
import time
from dataclasses import dataclass
from typing import Any

from es_rag import __version__
from es_rag.acl import acl_filter, normalize_caller
from es_rag.engine.index import ChunkIndex
from es_rag.errors import ConfigurationError, EsRagError, FilterError
from es_rag.query import build
from es_rag.query.guard import check_body
from es_rag.serve.dsl import (
    DslError,
    SearchPlan,
    parse_count,
    parse_search,
    source_param,
    source_spec,
)
from es_rag.serve.identity import Identity
from es_rag.types import Hit, SearchResponse

# The version the official 8.x and 9.x clients accept: a 9.x server takes requests made
# compatible with 8 and with 9.
COMPAT_VERSION = "9.0.0"
SEARCH_PARAMS = frozenset(
    {
        "rerank",
        "strategy",
        "q",
        "sort",
        "_source",
        "_source_includes",
        "_source_excludes",
        "preference",
        "from",
        "size",
        "track_total_hits",
        "explain",
        "rest_total_hits_as_int",
        "pretty",
        "human",
        "error_trace",
        "typed_keys",
        "ignore_unavailable",
        "allow_no_indices",
        "expand_wildcards",
        "allow_partial_search_results",
        "ccs_minimize_roundtrips",
        "max_concurrent_searches",
        "max_concurrent_shard_requests",
        "pre_filter_shard_size",
        "batched_reduce_size",
        "request_cache",
        "search_type",
        "timeout",
    }
)


class IndexNotFound(EsRagError):
    """An index or alias the caller may not read, or that is not there (404)."""

    def __init__(self, name: str) -> None:
        super().__init__(f"no such index [{name}]")
        self.name = name


def es_error_body(status: int, kind: str, reason: str, **extra: Any) -> dict[str, Any]:
    """Elasticsearch's error body (clients read ``error.type`` and ``error.reason``)."""
    cause = {"type": kind, "reason": " ".join(reason.split()), **extra}
    return {"error": {"root_cause": [cause], **cause}, "status": status}


def index_not_found(name: str) -> dict[str, Any]:
    return es_error_body(
        404,
        "index_not_found_exception",
        f"no such index [{name}]",
        index=name,
        **{"resource.type": "index_or_alias", "resource.id": name, "index_uuid": "_na_"},
    )


def root_info(service_name: str, cluster_name: str) -> dict[str, Any]:
    return {
        "name": service_name,
        "cluster_name": cluster_name,
        "cluster_uuid": "_na_",
        "version": {
            "number": COMPAT_VERSION,
            "build_flavor": "default",
            "build_type": "es-rag",
            "build_hash": "es-rag",
            "build_date": "2025-01-01T00:00:00.000Z",
            "build_snapshot": False,
            "lucene_version": "10.0.0",
            "minimum_wire_compatibility_version": "8.18.0",
            "minimum_index_compatibility_version": "8.0.0",
            "es_rag": __version__,
        },
        "tagline": "You Know, for Search (es-rag: hybrid, permission-aware)",
    }


def check_params(params: dict[str, str]) -> None:
    unknown = sorted(set(params) - SEARCH_PARAMS)
    if unknown:
        raise DslError(f"request contains unrecognized parameter(s): {unknown}")
    if "typed_keys" in params and params["typed_keys"] not in ("false", ""):
        raise DslError("typed_keys is not supported")


@dataclass
class Compat:
    """Runs Elasticsearch requests for one service (es_rag.serve.app.Service)."""

    service: Any

    @property
    def alias(self) -> str:
        return str(self.service.settings.index)

    # --- names ---------------------------------------------------------------------------
    def resolve(self, expr: str | None, who: Identity) -> str:
        """The served alias, if every name of ``expr`` resolves to it for this caller."""
        readable = not who.aliases or self.alias in who.aliases
        for part in (expr or "").split(","):
            name = part.strip()
            if name in ("_all", ""):
                name = "*"
            matched = name == self.alias or ("*" in name and fnmatch.fnmatchcase(self.alias, name))
            if not matched or not readable:
                raise IndexNotFound(part.strip() or "_all")
        return self.alias

    # --- _search ---------------------------------------------------------------------------
    def search(
        self, who: Identity, body: dict[str, Any] | None, params: dict[str, str]
    ) -> dict[str, Any]:
        started = time.perf_counter()
        check_params(params)
        plan = parse_search(
            body,
            self.service.searcher.field_types(),
            params,
            metadata_columns=self.service.engine.flavor != "opensearch",
        )
        self._check_text(plan)
        out = self._run_text(who, plan, params) if plan.text else self._browse(who, plan)
        out = {"took": int((time.perf_counter() - started) * 1000), **out}
        if _flag(params.get("rest_total_hits_as_int")) and "total" in out["hits"]:
            out["hits"]["total"] = out["hits"]["total"]["value"]
        return out

    def count(self, who: Identity, body: dict[str, Any] | None) -> dict[str, Any]:
        plan = parse_count(body, self.service.searcher.field_types())
        self._check_text(plan)
        if plan.text:
            n = len(self._candidates(who, plan, plan.filters, {}).hits)
        else:
            acl = self._acl(who)
            query = self._browse_query(acl, plan)
            resp = self._send({"query": query, "size": 0, "track_total_hits": True}, acl)
            n = resp["hits"]["total"]["value"]
        return {"count": n, "_shards": _SHARDS}

    def msearch(self, who: Identity, lines: list[Any], default: str | None) -> dict[str, Any]:
        started = time.perf_counter()
        if len(lines) % 2:
            raise DslError("msearch takes header and body lines in pairs", "parsing_exception")
        responses: list[dict[str, Any]] = []
        for header, body in zip(lines[::2], lines[1::2], strict=True):
            try:
                if not isinstance(header, dict):
                    raise DslError("an msearch header must be an object", "parsing_exception")
                extra = sorted(
                    set(header) - {"index", "search_type", "preference", "request_cache"}
                )
                if extra:
                    raise DslError(f"es-rag does not support {extra} in an msearch header")
                index = header.get("index", default)
                if isinstance(index, list):
                    index = ",".join(index)
                if index is None:
                    raise DslError("an msearch header needs an index when the URL has none")
                self.resolve(index, who)
                responses.append({**self.search(who, body, {}), "status": 200})
            except IndexNotFound as e:
                responses.append(index_not_found(e.name))
            except DslError as e:
                responses.append(es_error_body(400, e.kind, str(e)))
            except (FilterError, ConfigurationError) as e:  # e.g. rerank with no reranker
                responses.append(es_error_body(400, "illegal_argument_exception", str(e)))
        return {"took": int((time.perf_counter() - started) * 1000), "responses": responses}

    # --- _doc ------------------------------------------------------------------------------
    def get(self, who: Identity, chunk_id: str, params: dict[str, str]) -> dict[str, Any] | None:
        """One chunk by id, if the caller may read it; None (404) otherwise, whether it is
        missing or not theirs, so that a 404 tells nothing."""
        unknown = sorted(set(params) - {"_source", "_source_includes", "_source_excludes"})
        if unknown:
            raise DslError(f"request contains unrecognized parameter(s): {unknown}")
        acl = self._acl(who)
        body = {
            "query": {"bool": {"filter": [acl, {"ids": {"values": [chunk_id]}}]}},
            "size": 1,
            "_source": source_spec(source_param(params, True)),
            "track_total_hits": False,
        }
        hits = self._send(body, acl)["hits"]["hits"]
        if not hits:
            return None
        return {"_index": self.alias, "_id": chunk_id, "found": True, "_source": hits[0]["_source"]}

    # --- _mapping, _field_caps -----------------------------------------------------------
    def mapping(self) -> dict[str, Any]:
        props = ChunkIndex(self.service.engine, self.alias).mapping_properties()
        return {self.alias: {"mappings": {"properties": props}}}

    def field_caps(self, fields: str | None) -> dict[str, Any]:
        patterns = [f.strip() for f in (fields or "*").split(",") if f.strip()]
        out: dict[str, Any] = {}
        for name, kind in self.service.searcher.field_types().items():
            if not any(fnmatch.fnmatchcase(name, p) for p in patterns):
                continue
            kind = "flattened" if kind == "flat_object" else kind
            out[name] = {
                kind: {
                    "type": kind,
                    "metadata_field": False,
                    "searchable": kind != "object",
                    "aggregatable": kind not in ("text", "object", "dense_vector", "knn_vector"),
                }
            }
        return {"indices": [self.alias], "fields": out}

    # --- the two kinds of search -----------------------------------------------------------
    def _check_text(self, plan: SearchPlan) -> None:
        limit = self.service.settings.serve_max_query_chars
        if len(plan.text) > limit:
            raise DslError(f"the query text is longer than {limit} characters")

    def _candidates(
        self, who: Identity, plan: SearchPlan, clauses: list[dict[str, Any]], params: dict[str, str]
    ) -> SearchResponse:
        """es-rag's fused top ``rank_window_size`` for the question, under these filters."""
        s = self.service.settings
        return self.service.search(
            plan.text,
            caller=who.caller,
            k=s.rank_window_size,
            strategy=params.get("strategy"),
            rerank=_flag(params["rerank"]) if "rerank" in params else None,
            clauses=clauses,
            navigation=plan.filters_navigation,
        )

    def _run_text(self, who: Identity, plan: SearchPlan, params: dict[str, str]) -> dict[str, Any]:
        window = self.service.settings.rank_window_size
        if plan.from_ + plan.size > window:
            raise DslError(
                f"from + size must be at most {window} for a search with text: es-rag fuses "
                f"the top {window} of each retriever (ES_RAG_RANK_WINDOW_SIZE); narrow the "
                "query with filters instead of paging deeper"
            )
        acl = self._acl(who)
        with_post = [*plan.filters, plan.post_filter] if plan.post_filter else plan.filters
        result = self._candidates(who, plan, with_post, params)
        candidates = result.hits
        ids = [h.chunk_id for h in candidates]
        if plan.sort:  # a field order over the fused candidates, natively
            rows = self._send(
                self._rows_body(acl, ids, plan, sort=plan.sort, window=(plan.from_, plan.size)), acl
            )["hits"]["hits"]
            hits = [_es_hit(self.alias, r, None, r.get("sort")) for r in rows]
        else:
            page = candidates[plan.from_ : plan.from_ + plan.size]
            rows = self._rows(acl, page, plan)
            hits = [
                _es_hit(
                    self.alias,
                    rows[h.chunk_id],
                    h,
                    None,
                    explain=plan.explain,
                    strategy=result.strategy,
                )
                for h in page
                if h.chunk_id in rows  # a row deleted since it was ranked
            ]
        out: dict[str, Any] = {
            "timed_out": False,
            "_shards": _SHARDS,
            "hits": {
                **_total(len(candidates), window, plan.track_total_hits),
                "max_score": None if plan.sort else (candidates[0].score if candidates else None),
                "hits": hits,
            },
        }
        if plan.aggs is not None:
            scope = ids
            if plan.post_filter is not None:  # aggregations do not see the post_filter
                scope = [h.chunk_id for h in self._candidates(who, plan, plan.filters, params).hits]
            body = {
                "query": {"bool": {"filter": [acl, {"ids": {"values": scope}}]}},
                "size": 0,
                "track_total_hits": False,
                "aggs": plan.aggs,
            }
            out["aggregations"] = self._send(body, acl).get("aggregations", {})
        return out

    def _browse(self, who: Identity, plan: SearchPlan) -> dict[str, Any]:
        """No question: the caller's readable rows under the filters, natively."""
        acl = self._acl(who)
        body: dict[str, Any] = {
            "query": self._browse_query(acl, plan),
            "from": plan.from_,
            "size": plan.size,
            "_source": plan.source,
            "sort": plan.sort
            or [{"updated_at": {"order": "desc"}}, {"chunk_id": {"order": "asc"}}],
            "track_total_hits": plan.track_total_hits,
        }
        if plan.post_filter is not None:
            body["post_filter"] = plan.post_filter
        if plan.aggs is not None:
            body["aggs"] = plan.aggs
        resp = self._send(body, acl)
        hits = [_es_hit(self.alias, r, None, r.get("sort")) for r in resp["hits"]["hits"]]
        out: dict[str, Any] = {
            "timed_out": bool(resp.get("timed_out", False)),
            "_shards": _SHARDS,
            "hits": {"max_score": None, "hits": hits},
        }
        if "total" in resp["hits"]:
            out["hits"] = {"total": resp["hits"]["total"], **out["hits"]}
        if plan.aggs is not None:
            out["aggregations"] = resp.get("aggregations", {})
        return out

    # --- parts -----------------------------------------------------------------------------
    def _acl(self, who: Identity) -> dict[str, Any]:
        case_sensitive = self.service.settings.principal_case_sensitive
        return acl_filter(normalize_caller(who.caller, case_sensitive=case_sensitive))

    def _browse_query(self, acl: dict[str, Any], plan: SearchPlan) -> dict[str, Any]:
        navigation = [] if plan.filters_navigation else [build.WITHOUT_NAVIGATION]
        return {"bool": {"filter": build.retrieval_filters(acl, [*navigation, *plan.filters])}}

    def _rows_body(
        self,
        acl: dict[str, Any],
        ids: list[str],
        plan: SearchPlan,
        *,
        sort: list[dict[str, Any]] | None = None,
        window: tuple[int, int] | None = None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "query": {"bool": {"filter": [acl, {"ids": {"values": ids}}]}},
            "_source": plan.source,
            "from": window[0] if window else 0,
            "size": window[1] if window else len(ids),
            "track_total_hits": False,
        }
        if sort:
            body["sort"] = sort
        if plan.highlight is not None:
            fields = list(plan.highlight["fields"])
            analyzer = self.service.searcher.generation().analyzer
            words = analyzer.highlight_words(plan.text) or plan.text
            body["highlight"] = {
                **plan.highlight,
                "highlight_query": {"multi_match": {"query": words, "fields": fields}},
            }
        return body

    def _rows(
        self, acl: dict[str, Any], page: list[Hit], plan: SearchPlan
    ) -> dict[str, dict[str, Any]]:
        if not page:
            return {}
        body = self._rows_body(acl, [h.chunk_id for h in page], plan)
        return {r["_id"]: r for r in self._send(body, acl)["hits"]["hits"]}

    def _send(self, body: dict[str, Any], acl: dict[str, Any]) -> dict[str, Any]:
        check_body(body, acl)
        index = self.service.searcher.generation().index
        return self.service.engine.search(index, body)


_SHARDS = {"total": 1, "successful": 1, "skipped": 0, "failed": 0}


def _total(n: int, window: int, track: bool | int) -> dict[str, Any]:
    if track is False:
        return {}
    relation = "gte" if n >= window else "eq"
    if track is not True and n > track:
        return {"total": {"value": track, "relation": "gte"}}
    return {"total": {"value": n, "relation": relation}}


def _es_hit(
    alias: str,
    row: dict[str, Any],
    ranked: Hit | None,
    sort: list[Any] | None,
    *,
    explain: bool = False,
    strategy: str = "",
) -> dict[str, Any]:
    hit: dict[str, Any] = {
        "_index": alias,
        "_id": row["_id"],
        "_score": ranked.score if ranked is not None else None,
    }
    if "_source" in row:
        hit["_source"] = row["_source"]
    if row.get("highlight"):
        hit["highlight"] = row["highlight"]
    if sort is not None:
        hit["sort"] = sort
    if explain and ranked is not None:
        hit["_explanation"] = explanation(ranked, strategy)
    return hit


def explanation(hit: Hit, strategy: str) -> dict[str, Any]:
    """Each retriever's rank and score behind a fused score, in Elasticsearch's shape."""
    details = []
    for name, rank in hit.ranks.items():
        score = hit.scores.get(name)
        found = f"rank {rank}" if rank is not None else "not in its candidates"
        if score is not None:
            found += f", score {score:.6g}"
        details.append({"value": score or 0.0, "description": f"{name}: {found}", "details": []})
    return {
        "value": hit.score,
        "description": f"es-rag {strategy}: fused from {', '.join(hit.ranks) or 'no retriever'}",
        "details": details,
    }


def parse_ndjson(raw: bytes) -> list[Any]:
    try:
        return [json.loads(line) for line in raw.decode("utf-8").splitlines() if line.strip()]
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DslError(
            f"msearch body is not newline-delimited JSON: {e}", "parsing_exception"
        ) from None


def parse_json(raw: bytes) -> dict[str, Any] | None:
    if not raw.strip():
        return None
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DslError(f"request body is not JSON: {e}", "parsing_exception") from None
    if not isinstance(body, dict):
        raise DslError("the request body must be a JSON object", "parsing_exception")
    return body


def _flag(value: str | None) -> bool:
    return value is not None and value.lower() in ("", "true", "1")
