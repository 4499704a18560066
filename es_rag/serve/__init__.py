"""``es-rag serve``: the query side as an authenticated HTTP service (``serve.app``).

- ``keys``: API keys stored hashed in an index beside the chunks;
- ``identity``: who is calling, from an API key or a JWT and nothing else;
- ``batching``: query embeddings of concurrent requests encoded together;
- ``limits``, ``metrics``, ``models``: rate limits, Prometheus metrics, request bodies.
"""
