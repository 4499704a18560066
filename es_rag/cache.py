"""A small thread-safe LRU map: the query-vector cache of every Searcher (and of eval)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LRU(Generic[K, V]):
    """At most ``maxsize`` entries, least recently used out first; 0 keeps nothing and
    None keeps everything. Safe to share between threads (a service's requests)."""

    def __init__(self, maxsize: int | None) -> None:
        self.maxsize = maxsize
        self._data: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._data)

    def get_or_compute(self, key: K, compute: Callable[[], V]) -> V:
        """The cached value, or ``compute()`` stored. ``compute`` runs outside the lock (a
        model call must not serialise other threads); two threads missing the same key at
        once both compute it, and the last one stored wins."""
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                return self._data[key]
        value = compute()
        self._store([(key, value)])
        return value

    def get_many_or_compute(
        self, keys: Sequence[K], compute: Callable[[list[K]], Sequence[V]]
    ) -> list[V]:
        """The values of ``keys``, the missing ones from one ``compute(missing)`` call (one
        model call for a question's sentences, not one each)."""
        found: dict[K, V] = {}
        with self._lock:
            for key in keys:
                if key in self._data:
                    self._data.move_to_end(key)
                    found[key] = self._data[key]
        missing = [k for k in dict.fromkeys(keys) if k not in found]
        if missing:
            computed = list(zip(missing, compute(missing), strict=True))
            found.update(computed)
            self._store(computed)
        return [found[k] for k in keys]

    def _store(self, items: list[tuple[K, V]]) -> None:
        if self.maxsize == 0:
            return
        with self._lock:
            for key, value in items:
                self._data[key] = value
                self._data.move_to_end(key)
            while self.maxsize is not None and len(self._data) > self.maxsize:
                self._data.popitem(last=False)
