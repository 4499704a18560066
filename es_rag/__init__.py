"""es-rag: permission-aware hybrid retrieval for RAG on Elasticsearch."""

__version__ = "0.1.0"
