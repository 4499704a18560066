"""The service's Prometheus metrics, in a registry of its own (not the global one, so a
test or an embedding application can hold several services).

With ``--workers N`` each process counts for itself: scrape each, or run one process per
container as the compose file does.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "es_rag_requests",
            "requests answered, by route, strategy and status code",
            ["route", "strategy", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "es_rag_request_seconds",
            "request latency, by route and strategy",
            ["route", "strategy"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.embedding_batch = Histogram(
            "es_rag_embedding_batch_size",
            "query embeddings encoded in one call",
            buckets=_BATCH_BUCKETS,
            registry=self.registry,
        )
        self.rerank_fallbacks = Counter(
            "es_rag_rerank_fallbacks",
            "searches that asked for a rerank and kept the fused order (failure or timeout)",
            registry=self.registry,
        )
        self.auth_failures = Counter(
            "es_rag_auth_failures",
            "requests refused for their credential, by status (401 or 403)",
            ["status"],
            registry=self.registry,
        )
        self.rejections = Counter(
            "es_rag_rejections",
            "requests refused by a limit, by reason",
            ["reason"],
            registry=self.registry,
        )
