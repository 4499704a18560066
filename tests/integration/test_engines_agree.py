"""Elasticsearch and OpenSearch rank the same corpus the same way.

The same documents, model, analyzer and settings go into both servers; every strategy's
top 10 is compared per query. BM25 is the same Lucene formula on the same terms, so its
rankings must be identical; kNN is Lucene's float HNSW on both sides, configured through
each engine's own mapping, so only a rare near-tie may swap. The corpus is real English
prose that ships with every Python: the standard library's docstrings.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from es_rag.acl import make_acl, make_caller
from es_rag.analysis import TextAnalyzer
from es_rag.config import Settings
from es_rag.embedding import Embedder, SentenceTransformerEmbedder
from es_rag.engine.client import make_engine
from es_rag.pipeline import Ingestor
from es_rag.query.search import Searcher
from es_rag.types import Document
from tests.conftest import ENGINES, unique_index
from tests.integration.conftest import drop_alias

pytestmark = pytest.mark.integration

MODULES = (
    *("os", "json", "re", "collections", "itertools", "functools", "string", "textwrap"),
    *("datetime", "pathlib", "shutil", "subprocess", "statistics", "heapq", "bisect"),
    *("random", "math", "fractions", "decimal", "csv", "argparse", "logging", "threading"),
    *("queue", "socket", "zipfile", "tarfile", "gzip", "hashlib", "base64", "uuid"),
    *("tempfile", "glob", "difflib", "calendar", "enum", "dataclasses", "contextlib"),
    *("copy", "pickle", "sqlite3", "ipaddress"),
)
STRATEGIES = ("bm25", "knn", "client-rrf")


def stdlib_docstrings(limit: int = 300) -> dict[str, str]:
    docs: dict[str, str] = {}
    for module in MODULES:
        mod = importlib.import_module(module)
        for name, obj in sorted(vars(mod).items()):
            if name.startswith("_") or not (inspect.isfunction(obj) or inspect.isclass(obj)):
                continue
            text = inspect.getdoc(obj)
            if text and len(text.split()) >= 25:
                docs.setdefault(f"{module}.{name}", text)
    keys = sorted(docs)[:limit]
    return {k: docs[k] for k in keys}


class Memo(Embedder):
    """The real MiniLM, asked once per text: both engines get byte-identical vectors."""

    backend = "st"

    def __init__(self, inner: Embedder) -> None:
        super().__init__(model=inner.model, batch_size=inner.batch_size)
        self.inner = inner
        self.cache: dict[tuple[str, str], np.ndarray] = {}

    def embed_batch(self, texts: list[str], *, kind) -> np.ndarray:  # type: ignore[no-untyped-def]
        missing = [t for t in texts if (kind, t) not in self.cache]
        if missing:
            for text, row in zip(missing, self.inner.embed_batch(missing, kind=kind), strict=True):
                self.cache[(kind, text)] = row
        return np.stack([self.cache[(kind, t)] for t in texts])

    @property
    def embedding_version(self) -> str:
        return self.inner.embedding_version


@pytest.fixture(scope="module")
def both(
    request: pytest.FixtureRequest, minilm_path: str, embedder: SentenceTransformerEmbedder
) -> Iterator[dict[str, Searcher]]:
    if set(ENGINES) != {"elasticsearch", "opensearch"}:
        pytest.skip("compares two engines; ES_RAG_TEST_ENGINES selects only one")
    memo, analyzer = Memo(embedder), TextAnalyzer("english")
    corpus = stdlib_docstrings()
    acl = make_acl("docs", public=True)
    docs = [Document(doc_id=k, text=v, acl=acl) for k, v in corpus.items()]
    searchers: dict[str, Searcher] = {}
    made: list[tuple[Any, str]] = []
    try:
        for flavor in ("elasticsearch", "opensearch"):
            url = request.getfixturevalue(f"{flavor}_url")
            settings = Settings(
                es_url=url,
                engine=flavor,  # type: ignore[arg-type]
                index=unique_index("agree"),
                embedding_model=minilm_path,
                # Float HNSW on both: the engines, not their scalar quantisers, are compared
                # (with int8 each quantises its own segments and near-ties swap; the overlap
                # stays ~0.99, see the README's benchmark).
                vector_index_type="hnsw",
            )
            engine = make_engine(settings)
            made.append((engine, settings.index))
            ingestor = Ingestor(settings, client=engine, embedder=memo, analyzer=analyzer)
            results = ingestor.ingest_many(docs, refresh=True)
            assert all(r.status == "indexed" for r in results)
            searchers[flavor] = Searcher(settings, client=engine, embedder=memo, analyzer=analyzer)
        yield searchers
    finally:
        for engine, alias in made:
            drop_alias(engine, alias)
            engine.close()


def queries() -> list[str]:
    """The first line of every tenth docstring, cut to ten words: varied, real questions."""
    corpus = stdlib_docstrings()
    return [" ".join(corpus[k].split("\n")[0].split()[:10]) for k in sorted(corpus)[::10]]


def overlap(searchers: dict[str, Searcher], strategy: str) -> tuple[float, float]:
    """(share of queries with identical top-10 order, mean top-10 set overlap)."""
    caller = make_caller("docs", users=["user:reader"])
    same, shared = 0, 0.0
    qs = queries()
    for q in qs:
        tops = [
            [h.chunk_id for h in s.search(q, caller=caller, k=10, strategy=strategy).hits]
            for s in searchers.values()
        ]
        assert tops[0] and len(tops[0]) == len(tops[1])  # a short list only when few rows match
        same += tops[0] == tops[1]
        shared += len(set(tops[0]) & set(tops[1])) / len(tops[0])
    return same / len(qs), shared / len(qs)


def test_the_corpus_is_large_enough() -> None:
    assert len(stdlib_docstrings()) >= 200 and len(queries()) >= 20


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_rankings_agree(both: dict[str, Searcher], strategy: str) -> None:
    identical, mean_overlap = overlap(both, strategy)
    print(f"{strategy}: identical top-10 {identical:.2f}, mean overlap@10 {mean_overlap:.3f}")
    if strategy == "bm25":
        assert identical >= 0.95 and mean_overlap >= 0.99
    else:
        assert identical >= 0.9 and mean_overlap >= 0.98
