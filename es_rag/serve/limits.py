"""Per-credential rate limits: a token bucket per key (or token subject), in memory.

Each serving process keeps its own buckets, so with ``--workers N`` a key may reach N
times its rate in total; a limit that must hold across processes belongs in a proxy in
front of the service.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass


@dataclass
class _Bucket:
    tokens: float
    at: float


class RateLimiter:
    """``rate`` requests per second, bursts of up to ``max(1, rate)``."""

    def __init__(self, max_keys: int = 100_000) -> None:
        self._buckets: dict[str, _Bucket] = {}
        self._lock = threading.Lock()
        self.max_keys = max_keys

    def take(self, who: str, rate: float) -> float | None:
        """None when ``who`` may go on; else the seconds until it may (Retry-After)."""
        if rate <= 0:
            return None
        burst = max(1.0, rate)
        now = time.monotonic()
        with self._lock:
            bucket = self._buckets.get(who)
            if bucket is None:
                if len(self._buckets) >= self.max_keys:
                    self._buckets.clear()
                bucket = self._buckets[who] = _Bucket(tokens=burst, at=now)
            bucket.tokens = min(burst, bucket.tokens + (now - bucket.at) * rate)
            bucket.at = now
            if bucket.tokens >= 1.0:
                bucket.tokens -= 1.0
                return None
            return (1.0 - bucket.tokens) / rate


def retry_after(seconds: float) -> str:
    """A Retry-After header value: whole seconds, at least 1."""
    return str(max(1, math.ceil(seconds)))
