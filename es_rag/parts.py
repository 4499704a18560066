"""The parts every es-rag worker object needs, created on first use from settings.

Constructors do no I/O (STYLE.md): a client connects, a model loads and jieba reads its
dictionary only when first used, once per object (so once per worker process).
"""

from __future__ import annotations

from elasticsearch import Elasticsearch

from es_rag.analysis import TextAnalyzer
from es_rag.config import Settings
from es_rag.embedding import Embedder, build_embedder
from es_rag.engine.client import make_client


class Parts:
    """Client, embedder and analyzer: given, or built lazily from ``settings``."""

    def __init__(
        self,
        settings: Settings,
        *,
        client: Elasticsearch | None = None,
        embedder: Embedder | None = None,
        analyzer: TextAnalyzer | None = None,
    ) -> None:
        self.settings = settings
        self._client = client
        self._embedder = embedder
        self._analyzer = analyzer

    @property
    def client(self) -> Elasticsearch:
        if self._client is None:
            self._client = make_client(self.settings)
        return self._client

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            self._embedder = build_embedder(self.settings)
        return self._embedder

    @property
    def analyzer(self) -> TextAnalyzer:
        if self._analyzer is None:
            self._analyzer = TextAnalyzer(self.settings.analyzer_language)
        return self._analyzer
