"""One home for loading a local model: lazily, once, thread-safely, with a clear error.

Embedders and rerankers both hold a library model (sentence-transformers, FlagEmbedding)
that is expensive to build and must not be built at construction time (a Celery prefork
pool forks before any model loads; configuration checks must stay cheap). Several threads
(a web server's, a thread pool's) may ask for it at once; it is built exactly once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from es_rag.errors import EsRagError

T = TypeVar("T")


class LazyModel(Generic[T]):
    """Calls ``load`` on the first ``get()``, under a lock; a failure is raised as ``error``
    naming ``what``, and the next ``get()`` tries again."""

    def __init__(
        self,
        load: Callable[[], T],
        *,
        error: type[EsRagError],
        what: str,
        check: Callable[[], None] | None = None,
    ) -> None:
        self._load = load
        self._error = error
        self._what = what
        self._check = check
        self._lock = threading.Lock()
        self._value: T | None = None

    @property
    def loaded(self) -> bool:
        return self._value is not None

    def get(self) -> T:
        if self._value is None:
            with self._lock:
                if self._value is None:
                    if self._check is not None:
                        self._check()  # raises es-rag's own, clearer errors first
                    try:
                        self._value = self._load()
                    except Exception as exc:
                        raise self._error(
                            f"cannot load {self._what}: {type(exc).__name__}: {exc}"
                        ) from exc
        return self._value


def auto_device() -> str:
    """The best torch device here: the first GPU, Apple's MPS, else the CPU."""
    import torch

    if torch.cuda.is_available():
        return "cuda:0"
    if torch.backends.mps.is_available():
        return "mps"
    return "cpu"
