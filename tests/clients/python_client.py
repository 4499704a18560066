"""Run by the Elasticsearch-compatible surface tests under another client version's
interpreter (the official Python client 8.x lives in a virtualenv of its own): every call
a frontend makes, through the client, printed as one JSON object.

    python python_client.py URL API_KEY INDEX "question" FACET_FIELD
"""

from __future__ import annotations

import json
import sys

import elasticsearch
from elasticsearch import Elasticsearch, NotFoundError


def main(url: str, key: str, index: str, question: str, facet: str) -> None:
    es = Elasticsearch(url, api_key=key, request_timeout=60)
    text = {"multi_match": {"query": question, "fields": ["title", "content"]}}
    found = es.search(index=index, query=text, size=5, aggs={"facet": {"terms": {"field": facet}}})
    many = es.msearch(
        index=index,
        searches=[{}, {"query": text, "size": 2}, {}, {"query": {"match_all": {}}, "size": 1}],
    )
    try:
        es.search(index="not-there", query={"match_all": {}})
        missing = None
    except NotFoundError as e:
        missing = {"status": e.meta.status, "type": e.body["error"]["type"]}
    out = {
        "client": elasticsearch.__versionstr__,
        "info": es.info()["version"]["number"],
        "ids": [h["_id"] for h in found["hits"]["hits"]],
        "docs": [h["_source"]["doc_id"] for h in found["hits"]["hits"]],
        "index": sorted({h["_index"] for h in found["hits"]["hits"]}),
        "total": found["hits"]["total"],
        "facet": {b["key"]: b["doc_count"] for b in found["aggregations"]["facet"]["buckets"]},
        "msearch": [[h["_id"] for h in r["hits"]["hits"]] for r in many["responses"]],
        "count": es.count(index=index, query=text)["count"],
        "mapping": sorted(es.indices.get_mapping(index=index)[index]["mappings"]["properties"]),
        "field_caps": sorted(es.field_caps(index=index, fields="*")["fields"]),
        "missing": missing,
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main(*sys.argv[1:6])
