"""Text embedding backends behind one small interface (``Embedder``).

- ``base``: the contract and what every backend shares (batching, checks, the version);
- ``local``: sentence-transformers and FlagEmbedding, in-process on torch (sentence-transformers
  also on ONNX Runtime: ``embedding_runtime``);
- ``remote``: an OpenAI-compatible embeddings server.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from es_rag.embedding.base import Embedder, Kind
from es_rag.embedding.local import FlagEmbedder, SentenceTransformerEmbedder
from es_rag.errors import ConfigurationError

if TYPE_CHECKING:
    from es_rag.config import Settings
    from es_rag.embedding.remote import OpenAIEmbedder

__all__ = [
    "Embedder",
    "FlagEmbedder",
    "Kind",
    "OpenAIEmbedder",
    "SentenceTransformerEmbedder",
    "build_embedder",
]


def __getattr__(name: str) -> Any:
    # The remote backend's HTTP client (httpx) is a tenth of a second of every CLI start.
    if name == "OpenAIEmbedder":
        from es_rag.embedding.remote import OpenAIEmbedder

        return OpenAIEmbedder
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def build_embedder(settings: Settings) -> Embedder:
    """The embedder the settings describe (nothing is loaded or contacted yet)."""
    common: dict[str, Any] = {
        "model": settings.embedding_model,
        "batch_size": settings.embedding_batch_size,
        "normalize": settings.embedding_normalize,
        "query_prefix": settings.query_prefix,
        "passage_prefix": settings.passage_prefix,
        "dims": settings.embedding_dims,
    }
    backend = settings.embedding_backend
    runtime = settings.embedding_runtime
    if runtime != "torch" and backend != "sentence-transformers":
        # Settings refuse this too; a recipe copied with model_copy() is not re-validated.
        raise ConfigurationError(
            f"embedding runtime {runtime!r} applies to the sentence-transformers backend "
            f"only, not {backend!r}"
        )
    if backend == "sentence-transformers":
        return SentenceTransformerEmbedder(
            **common,
            device=settings.device,
            max_length=settings.embedding_max_length,
            runtime=runtime,
            onnx_cache=settings.embedding_onnx_cache,
            streams=settings.embedding_streams,
        )
    if backend == "flag":
        return FlagEmbedder(
            **common, device=settings.device, max_length=settings.embedding_max_length
        )
    if backend == "openai":
        if not settings.embedding_url:
            raise ConfigurationError("ES_RAG_EMBEDDING_URL is required for the openai backend")
        from es_rag.embedding.remote import OpenAIEmbedder

        key = settings.embedding_api_key
        return OpenAIEmbedder(
            **common,
            url=settings.embedding_url,
            api_key=key.get_secret_value() if key is not None else None,
            input_type=settings.embedding_input_type,
            timeout=settings.embedding_timeout,
            max_retries=settings.embedding_max_retries,
        )
    raise ConfigurationError(f"unknown embedding backend {backend!r}")
