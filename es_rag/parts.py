"""The parts every es-rag worker object needs, created on first use from settings.

Constructors do no I/O (STYLE.md): the engine is detected and connects, a model loads and
jieba reads its dictionary only when first used, once per object (so once per worker
process).
"""

from __future__ import annotations

from typing import Any

from es_rag.analysis import TextAnalyzer
from es_rag.config import Settings
from es_rag.embedding import Embedder, build_embedder
from es_rag.engine.client import Engine, engine_for_client, make_engine


class Parts:
    """Engine, embedder and analyzer: given, or built lazily from ``settings``.

    ``client`` may be an ``elasticsearch.Elasticsearch``, an ``opensearchpy.OpenSearch``
    or an es-rag ``Engine``: callers who already hold a client keep using it.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        client: Any = None,
        embedder: Embedder | None = None,
        analyzer: TextAnalyzer | None = None,
    ) -> None:
        self.settings = settings
        self._engine: Engine | None = (
            engine_for_client(client, settings) if client is not None else None
        )
        self._embedder = embedder
        self._analyzer = analyzer

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            self._engine = make_engine(self.settings)
        return self._engine

    @property
    def client(self) -> Any:
        """The engine's own client (``Elasticsearch`` or ``OpenSearch``), for native calls."""
        return self.engine.client

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
