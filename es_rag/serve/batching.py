"""Query embeddings of concurrent requests, encoded together.

One encode of 16 short questions costs little more than one of a single question, so a
service that encodes each request alone queues its requests behind the model. The
``BatchingEmbedder`` puts each query on a queue; one thread takes what has arrived within
``wait_ms`` (or up to ``max_batch``) and encodes it in one call. It waits only for
requests that are on their way (announced with ``expecting()`` by the service when a
search starts, and not yet queued): a lone query is encoded at once, and under load a
batch gathers the searches that are a few milliseconds behind.

``max_pending`` bounds the queue: beyond it a query is refused at once with
``OverloadedError`` (the service answers 503 with ``Retry-After``) instead of waiting
behind a queue it cannot get through within the request timeout.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager

import numpy as np

from es_rag.embedding.base import Embedder, Kind
from es_rag.errors import TransientError


class OverloadedError(TransientError):
    """Too many queries wait for an embedding; try again shortly (503)."""


_STOP = object()


class BatchingEmbedder(Embedder):
    """Wraps a real embedder; ``embed_query`` is micro-batched, everything else delegates."""

    def __init__(
        self,
        inner: Embedder,
        *,
        max_batch: int = 32,
        wait_ms: float = 2.0,
        max_pending: int = 256,
        timeout: float = 30.0,
        on_batch: Callable[[int], None] | None = None,
    ) -> None:
        super().__init__(
            model=inner.model,
            batch_size=inner.batch_size,
            normalize=inner.normalize,
            query_prefix=inner.query_prefix,
            passage_prefix=inner.passage_prefix,
        )
        self.inner = inner
        self.backend = inner.backend
        self.max_batch = max(1, max_batch)
        self.wait_s = max(0.0, wait_ms) / 1000.0
        self.max_pending = max(1, max_pending)
        self.timeout = timeout
        self.on_batch = on_batch
        self._queue: queue.Queue[object] = queue.Queue()
        self._pending = threading.BoundedSemaphore(self.max_pending)
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._coming = 0  # announced searches that have not queued their query yet
        self._count_lock = threading.Lock()
        self._local = threading.local()

    # --- delegation ------------------------------------------------------------------------
    def embed_batch(self, texts: list[str], *, kind: Kind) -> np.ndarray:
        return self.inner.embed_batch(texts, kind=kind)

    def embed(self, texts: Sequence[str], *, kind: Kind = "passage") -> np.ndarray:
        return self.inner.embed(texts, kind=kind)

    @property
    def dims(self) -> int:
        return self.inner.dims

    @property
    def embedding_version(self) -> str:
        return self.inner.embedding_version

    def token_counter(self) -> tuple[Callable[[str], int], int | None]:
        return self.inner.token_counter()

    # --- the batched path ------------------------------------------------------------------
    @contextmanager
    def expecting(self) -> Iterator[None]:
        """Announce that this thread's work may embed a query soon (a search starting)."""
        with self._count_lock:
            self._coming += 1
        self._local.announced = True
        try:
            yield
        finally:
            self._arrived()

    def _arrived(self) -> None:
        if getattr(self._local, "announced", False):
            self._local.announced = False
            with self._count_lock:
                self._coming -= 1

    def embed_query(self, text: str) -> list[float]:
        if not self._pending.acquire(blocking=False):
            self._arrived()
            raise OverloadedError(
                f"{self.max_pending} queries are already waiting for an embedding"
            )
        try:
            self._ensure_thread()
            future: Future[list[float]] = Future()
            self._queue.put((text, future))
            self._arrived()
            return future.result(timeout=self.timeout)
        finally:
            self._pending.release()

    def close(self) -> None:
        if self._thread is not None:
            self._queue.put(_STOP)
            self._thread.join(timeout=5)
            self._thread = None

    def _ensure_thread(self) -> None:
        if self._thread is None:
            with self._start_lock:
                if self._thread is None:
                    thread = threading.Thread(target=self._run, name="es-rag-embed", daemon=True)
                    thread.start()
                    self._thread = thread

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is _STOP:
                return
            batch = [first]
            deadline = time.monotonic() + self.wait_s
            stop = False
            while len(batch) < self.max_batch:
                if self._coming <= 0 and self._queue.empty():
                    break  # nobody else is on the way: do not make these wait
                try:
                    # What has already arrived joins at once; then wait out the window.
                    item = self._queue.get_nowait()
                except queue.Empty:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    try:
                        item = self._queue.get(timeout=remaining)
                    except queue.Empty:
                        break
                if item is _STOP:
                    stop = True
                    break
                batch.append(item)
            self._encode(batch)  # type: ignore[arg-type]
            if stop:
                return

    def _encode(self, batch: list[tuple[str, Future[list[float]]]]) -> None:
        live = [(t, f) for t, f in batch if f.set_running_or_notify_cancel()]
        if not live:
            return
        try:
            vectors = self.inner.embed([t for t, _ in live], kind="query")
        except BaseException as exc:  # every waiter learns what went wrong
            for _, future in live:
                future.set_exception(exc)
            return
        if self.on_batch is not None:
            self.on_batch(len(live))
        for (_, future), vector in zip(live, vectors, strict=True):
            future.set_result(vector.tolist())
