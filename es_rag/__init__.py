"""es-rag: permission-aware hybrid retrieval for RAG on Elasticsearch.

The public API is re-exported here and imported lazily, so ``import es_rag`` (and the CLI's
start-up) does not pay for the search client or the model libraries until they are used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "Settings": "es_rag.config",
    "Ingestor": "es_rag.pipeline",
    "Searcher": "es_rag.query.search",
    "Document": "es_rag.types",
    "Caller": "es_rag.types",
    "AccessControl": "es_rag.types",
    "Hit": "es_rag.types",
    "SearchResponse": "es_rag.types",
    "IngestResult": "es_rag.types",
    "make_acl": "es_rag.acl",
    "make_caller": "es_rag.acl",
    "EsRagError": "es_rag.errors",
    "WalkFilter": "es_rag.files",
}

__all__ = [
    "AccessControl",
    "Caller",
    "Document",
    "EsRagError",
    "Hit",
    "IngestResult",
    "Ingestor",
    "SearchResponse",
    "Searcher",
    "Settings",
    "WalkFilter",
    "__version__",
    "make_acl",
    "make_caller",
]

if TYPE_CHECKING:
    from es_rag.acl import make_acl, make_caller
    from es_rag.config import Settings
    from es_rag.errors import EsRagError
    from es_rag.files import WalkFilter
    from es_rag.pipeline import Ingestor
    from es_rag.query.search import Searcher
    from es_rag.types import AccessControl, Caller, Document, Hit, IngestResult, SearchResponse


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'es_rag' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
