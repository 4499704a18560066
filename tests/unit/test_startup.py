"""What a short command imports: a re-ingest that finds nothing changed is mostly start-up.

Each check runs in a fresh interpreter (the test process has imported everything already)
and names the modules that must stay out until work needs them, then shows that they still
load, and work, once it does.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _run(code: str) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    )
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_cli_start_leaves_out_what_an_unchanged_reingest_never_uses() -> None:
    # The path of `es-rag ingest` up to the unchanged check: the CLI, the Ingestor, the
    # engine's client and an embedder's contract fields (no model, no vector).
    code = """
import json, sys
import es_rag.cli as cli
cli._import_sync_transport()
from es_rag.config import Settings
from es_rag.analysis import TextAnalyzer
from es_rag.embedding import build_embedder
from es_rag.engine.elastic import make_elasticsearch_client
from es_rag.parsing import parser_version
from es_rag.pipeline import Ingestor
settings = Settings(es_url="http://127.0.0.1:9", embedding_model="some/model")
make_elasticsearch_client(settings).close()
build_embedder(settings)
parser_version(), TextAnalyzer("english").version
names = ("aiohttp", "httpx", "requests", "pyarrow", "numpy", "markdown_it",
         "es_rag.sandbox", "es_rag.cleaning", "es_rag.parsing.child", "es_rag.embedding.remote",
         "elasticsearch._async.client", "elasticsearch.helpers")
print(json.dumps({"loaded": [n for n in names if n in sys.modules]}))
"""
    assert _run(code) == {"loaded": []}


def test_left_out_modules_still_load_when_needed() -> None:
    # The CLI's synchronous transport keeps urllib3, and the packages it left out import
    # normally afterwards (Unstructured needs requests; the remote embedder needs httpx).
    code = """
import json
import es_rag.cli as cli
cli._import_sync_transport()
import elastic_transport, requests, httpx
from es_rag.embedding import OpenAIEmbedder
from es_rag.parsing import partition_file
from es_rag.analysis import TextAnalyzer
from es_rag.markdown import text_elements
from elasticsearch import AsyncElasticsearch, Elasticsearch
import elasticsearch
from es_rag.engine.elastic import ElasticsearchEngine
client = Elasticsearch("http://127.0.0.1:9")
print(json.dumps({
    "async": [AsyncElasticsearch.__module__, elasticsearch.AsyncElasticsearch is
              AsyncElasticsearch],
    "bulk": callable(ElasticsearchEngine(client).helpers.streaming_bulk),
    "node": type(client.transport.node_pool.get()).__name__,
    "embedder": OpenAIEmbedder.__name__,
    "partition_file": callable(partition_file),
    "tokens": TextAnalyzer("english").terms("Running quickly"),
    "elements": len(text_elements("# Title\\n\\nSome text.")),
    "requests": hasattr(requests, "get"),
    "httpx": hasattr(httpx, "Client"),
}))
"""
    out = _run(code)
    assert out["async"] == ["elasticsearch._async.client", True]
    assert out["bulk"] is True
    assert out["node"] == "Urllib3HttpNode"
    assert out["embedder"] == "OpenAIEmbedder"
    assert out["partition_file"] is True
    assert out["tokens"] == ["run", "quick"]
    assert out["elements"] == 2
    assert out["requests"] is True and out["httpx"] is True
