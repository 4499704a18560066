"""The embedder contract: what every backend shares, so a backend only embeds one batch.

The base class owns everything that must behave identically whatever produces the vectors —
batching, query/passage prefixes, L2 normalisation, shape checks and the version fingerprint
recorded in the index — so that a backend only has to turn one batch of texts into a matrix.
Backends load lazily: building an embedder is free, which keeps CLI start-up, Celery worker
forks and configuration validation cheap, and nothing touches the network until it must.
numpy too is imported where vectors are made: a command that only checks the index's
contract (a re-ingest of unchanged files) builds an embedder and never embeds.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from es_rag.chunking import estimate_tokens
from es_rag.errors import ConfigurationError, EmbeddingError

if TYPE_CHECKING:
    import numpy as np

Kind = Literal["query", "passage"]

_KINDS: tuple[Kind, ...] = ("query", "passage")
_PROBE_TEXT = "dimension probe"
# Prefixes longer than this go into the fingerprint as a hash so it stays short.
_MAX_VERBATIM_PREFIX = 32


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
        batch_size: int | None = 32,
        normalize: bool = True,
        query_prefix: str = "",
        passage_prefix: str = "",
        dims: int | None = None,
        streams: int = 1,
    ) -> None:
        if batch_size is not None and batch_size < 1:
            raise ConfigurationError(f"embedding batch_size must be >= 1, got {batch_size}")
        if dims is not None and dims < 1:
            raise ConfigurationError(f"embedding dims must be >= 1, got {dims}")
        if streams < 1:
            raise ConfigurationError(f"embedding streams must be >= 1, got {streams}")
        self.model = model
        self.streams = streams
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        self._embedded = False  # a call has run to its end (see embed's streams)
        self.batch_size = batch_size
        self.normalize = normalize
        self.query_prefix = query_prefix
        self.passage_prefix = passage_prefix
        # Configured dims are a promise the first real batch must keep; probed dims are facts.
        self._dims: int | None = dims
        self._promised_dims = dims
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
        import numpy as np

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

        # Batches of texts of like length: a batch is padded to its longest text, so a
        # call's texts are sorted by length across the whole call (many documents), not
        # only within each batch as the libraries do; the rows go back in order below.
        order = sorted(range(len(items)), key=lambda i: -len(items[i]))
        items = [items[i] for i in order]
        # One text (a query) needs no batch size: on a GPU choosing one means measuring.
        size = self.effective_batch_size() if len(items) > 1 else 1
        starts = list(range(0, len(items), size))

        def one(start: int) -> np.ndarray:
            batch = items[start : start + size]
            try:
                raw = self.embed_batch(batch, kind=kind)
            except EmbeddingError:
                raise
            except Exception as exc:
                raise EmbeddingError(
                    f"{self.backend} embedding failed on texts {start}..{start + len(batch) - 1}"
                    f" (model {self.model}): {type(exc).__name__}: {exc}"
                ) from exc
            return self._check_batch(raw, len(batch), start)

        pool = self._stream_pool() if len(starts) > 2 else None
        if pool is None:
            parts = [one(start) for start in starts]
        elif not self._embedded:
            # The first batch of the process alone: it learns the width, and a backend's
            # tokenizer takes its settings (the same for every call) on it, so the streams
            # only ever read them. Later calls keep every core busy from their first batch.
            parts = [one(starts[0])]
            parts += pool.map(one, starts[1:])
        else:
            parts = list(pool.map(one, starts))
        self._embedded = True

        out = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)
        out[order] = out.copy()
        if self.normalize:
            out = _l2_normalise(out)
        return np.ascontiguousarray(out, dtype=np.float32)

    def _stream_pool(self) -> ThreadPoolExecutor | None:
        """Threads that embed a call's batches side by side, when ``streams`` > 1 and the
        backend can: one stream per core, each with one math thread, outruns one stream
        using every core's threads, whose threads wait for each other at every operation
        (and all of them for any other work on the cores, such as a search server's)."""
        if self.streams < 2:
            return None
        with self._pool_lock:
            if self._pool is None:
                if not self._prepare_streams():
                    self.streams = 1
                    return None
                self._pool = ThreadPoolExecutor(self.streams, thread_name_prefix="es-rag-embed")
            return self._pool

    def _prepare_streams(self) -> bool:
        """Whether this backend embeds batches from several threads at once (after
        setting itself up for it). Not by default: a backend says so."""
        return False

    def effective_batch_size(self) -> int:
        """Texts per ``embed_batch``: the configured size, else this backend's choice."""
        return self.batch_size or self._auto_batch_size()

    def _auto_batch_size(self) -> int:
        return 32

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
        """Fingerprint of everything that changes the vectors; a mismatch means re-embed.

        A local model's fingerprint needs the model loaded (seconds); it is remembered on
        disk under a key of its configuration and its files' sizes and times, so that a
        process that finds nothing to embed (a re-ingest of unchanged files) never loads it.
        """
        if self._version is None:
            # Promised dims are not a fact yet (the first batch checks them): not remembered.
            key = self._version_key() if self._promised_dims is None else None
            remembered = _remembered(key) if key else None
            if remembered is not None:
                self._version, self._dims = remembered
                return self._version
            norm = "norm" if self.normalize else "raw"
            parts = [
                f"{self.backend}:{self._model_identity()}",
                str(self.dims),
                norm,
                *self._version_extras(),
            ]
            self._version = ":".join(parts)
            if key:
                _remember(key, self._version, self.dims)
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

    def _version_key(self) -> str | None:
        """A key under which this embedder's fingerprint may be remembered across
        processes, or None (the default: computed in every process)."""
        return None

    def _settings_key(self) -> dict[str, Any]:
        """Every public plain setting of this embedder: what a remembered fingerprint
        depends on besides the model's files (a new setting is covered without a change
        here; private state such as probed dims is not a setting)."""
        return {
            name: value
            for name, value in sorted(vars(self).items())
            if not name.startswith("_") and isinstance(value, (str, int, float, bool, type(None)))
        }

    def _version_extras(self) -> list[str]:
        """Fingerprint parts after dims; by default the prefixes (they change the vectors)."""
        if not self._uses_prefixes():
            return []
        return [f"q={_short_text(self.query_prefix)}", f"p={_short_text(self.passage_prefix)}"]

    def _check_batch(self, raw: Any, expected_rows: int, start: int) -> np.ndarray:
        import numpy as np

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


def _versions_folder() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "es-rag" / "embedding-versions"


def _remembered(key: str) -> tuple[str, int] | None:
    try:
        data = json.loads((_versions_folder() / f"{key}.json").read_text(encoding="utf-8"))
        return str(data["version"]), int(data["dims"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _remember(key: str, version: str, dims: int) -> None:
    """Best effort: a cache that cannot be written only costs the next process a load."""
    folder = _versions_folder()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=folder, suffix=".tmp", delete=False) as fh:
            json.dump({"version": version, "dims": dims}, fh)
        os.replace(fh.name, folder / f"{key}.json")
    except OSError:
        pass


def _l2_normalise(vectors: np.ndarray) -> np.ndarray:
    import numpy as np

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
