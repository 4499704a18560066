"""The service's pure parts: micro-batching, rate limits, key encoding, JWT claims, errors."""

from __future__ import annotations

import base64
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import jwt
import numpy as np
import pytest

from es_rag.config import Settings
from es_rag.embedding import Kind
from es_rag.errors import (
    ConfigurationError,
    EngineUnavailableError,
    FilterError,
    IndexContractError,
)
from es_rag.serve.app import LimitError, RateLimited, RequestTimeout, _snake, error_status
from es_rag.serve.batching import BatchingEmbedder, OverloadedError
from es_rag.serve.identity import Authenticator, Forbidden, Identity, Unauthorized
from es_rag.serve.keys import ApiKey, NewKey, decode, parse_duration
from es_rag.serve.limits import RateLimiter, retry_after
from tests.unit.test_embedding_base import HashEmbedder

pytestmark = pytest.mark.unit


class SlowHashEmbedder(HashEmbedder):
    """Each encode takes ``delay`` seconds, like a model that is busy."""

    def __init__(self, delay: float, **kwargs: Any) -> None:
        super().__init__(model="hash", **kwargs)
        self.delay = delay

    def embed_batch(self, texts: list[str], *, kind: Kind) -> np.ndarray:
        time.sleep(self.delay)
        return super().embed_batch(texts, kind=kind)


def _concurrently(fn: Any, items: list[str]) -> list[Any]:
    out: list[Any] = [None] * len(items)

    def one(i: int) -> None:
        try:
            out[i] = fn(items[i])
        except Exception as exc:
            out[i] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(items))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


# --- micro-batching ----------------------------------------------------------------------------
def test_concurrent_queries_share_encodes_and_get_their_own_vectors() -> None:
    inner = SlowHashEmbedder(0.05, query_prefix="q: ")
    sizes: list[int] = []
    batching = BatchingEmbedder(inner, max_batch=8, wait_ms=20, on_batch=sizes.append)
    texts = [f"question {i}" for i in range(20)]
    vectors = _concurrently(batching.embed_query, texts)
    expected = HashEmbedder(model="hash", query_prefix="q: ")
    for text, vector in zip(texts, vectors, strict=True):
        assert vector == pytest.approx(expected.embed_query(text))
    assert sum(sizes) == 20 and max(sizes) <= 8
    assert len(inner.calls) < 20  # shared, not one encode per question
    assert all(t.startswith("q: ") for call, _ in inner.calls for t in call)
    batching.close()


def test_a_lone_query_does_not_wait_for_the_window() -> None:
    batching = BatchingEmbedder(HashEmbedder(model="hash"), wait_ms=2000)
    t0 = time.perf_counter()
    batching.embed_query("alone")
    assert time.perf_counter() - t0 < 1.0  # the window is 2 s
    batching.close()


def test_a_full_queue_refuses_at_once() -> None:
    batching = BatchingEmbedder(SlowHashEmbedder(0.3), max_pending=2, max_batch=1)
    results = _concurrently(batching.embed_query, [f"q{i}" for i in range(8)])
    refused = [r for r in results if isinstance(r, OverloadedError)]
    assert refused and len(refused) <= 6
    assert all(isinstance(r, list | OverloadedError) for r in results)
    assert isinstance(batching.embed_query("later"), list)  # capacity comes back
    batching.close()


def test_an_encode_failure_reaches_every_waiter_and_the_next_batch_works() -> None:
    class Flaky(HashEmbedder):
        fail = True

        def embed_batch(self, texts: list[str], *, kind: Kind) -> np.ndarray:
            if self.fail:
                raise RuntimeError("model fell over")
            return super().embed_batch(texts, kind=kind)

    inner = Flaky(model="hash")
    batching = BatchingEmbedder(inner, wait_ms=50)
    results = _concurrently(batching.embed_query, ["a", "b", "c"])
    assert all("model fell over" in str(r) for r in results)
    inner.fail = False
    assert isinstance(batching.embed_query("d"), list)
    assert batching.embedding_version == inner.embedding_version
    batching.close()


# --- rate limits ------------------------------------------------------------------------------
def test_token_bucket_allows_its_burst_then_says_how_long_to_wait() -> None:
    limiter = RateLimiter()
    assert [limiter.take("k", 3.0) for _ in range(3)] == [None, None, None]
    wait = limiter.take("k", 3.0)
    assert wait is not None and 0 < wait <= 1 / 3 + 0.01
    assert limiter.take("other", 3.0) is None  # per key
    assert limiter.take("k", 0) is None  # 0: unlimited
    time.sleep(wait + 0.01)
    assert limiter.take("k", 3.0) is None
    assert retry_after(0.01) == "1" and retry_after(2.2) == "3"


# --- keys -------------------------------------------------------------------------------------
def test_encoded_keys_round_trip_and_garbage_is_not_a_key() -> None:
    key = ApiKey(key_id="abc_DEF-1", name="", tenant="t", principals=(), role="search")
    made = NewKey(key=key, secret="s3:cr3t")
    assert decode(made.encoded) == ("abc_DEF-1", "s3:cr3t")
    assert base64.b64decode(made.encoded) == b"abc_DEF-1:s3:cr3t"
    for junk in (
        "",
        "!!!",
        base64.b64encode(b"nocolon").decode(),
        base64.b64encode(b":x").decode(),
    ):
        assert decode(junk) is None


def test_durations_and_expiry() -> None:
    assert parse_duration("30d") == timedelta(days=30)
    assert parse_duration("15m") == timedelta(minutes=15)
    with pytest.raises(ConfigurationError):
        parse_duration("thirty days")
    now = datetime.now(timezone.utc)
    past = (now - timedelta(seconds=1)).isoformat()
    key = ApiKey(key_id="i", name="", tenant="t", principals=(), role="search", expires_at=past)
    assert key.usable(now) == "the key has expired"
    assert ApiKey(key_id="i", name="", tenant="t", principals=(), role="search").usable(now) is None


def test_roles_and_aliases() -> None:
    who = Identity("k", "key", "t", frozenset(), "search", aliases=("docs",))
    who.require("search", "docs")
    with pytest.raises(Forbidden):
        who.require("ingest", "docs")
    with pytest.raises(Forbidden):
        who.require("search", "other")
    Identity("k", "key", "t", frozenset(), "admin").require("ingest", "anything")


# --- JWT --------------------------------------------------------------------------------------
class NoKeys:
    def verify(self, credential: str) -> Any:
        raise AssertionError("a JWT must not be looked up as a key")


def _auth(**settings: Any) -> Authenticator:
    values = {"jwt_secret": "x" * 40, "jwt_issuer": "idp", "jwt_audience": "es-rag", **settings}
    return Authenticator(Settings(**values), NoKeys())  # type: ignore[arg-type]


def _token(claims: dict[str, Any], key: str = "x" * 40) -> str:
    base = {"iss": "idp", "aud": "es-rag", "exp": int(time.time()) + 60}
    return "Bearer " + jwt.encode({**base, **claims}, key, algorithm="HS256")


def test_jwt_claims_become_the_identity_in_normal_form() -> None:
    who = _auth().identify(_token({"tenant": "Acme", "sub": "Alice", "principals": ["group:Ops"]}))
    assert who.tenant == "acme" and who.principals == {"user:alice", "group:ops"}
    assert who.kind == "jwt" and who.role == "search"
    custom = _auth(jwt_tenant_claim="org", jwt_principals_claim="groups", jwt_user_claim="")
    who = custom.identify(_token({"org": "globex", "sub": "bob", "groups": "group:x"}))
    assert who.tenant == "globex" and who.principals == {"group:x"}


@pytest.mark.parametrize(
    "claims",
    [
        {"sub": "a"},  # no tenant
        {"tenant": "t", "exp": int(time.time()) - 5},
        {"tenant": "t", "aud": "other"},
        {"tenant": "t", "iss": "elsewhere"},
        {"tenant": "t", "role": "root"},
        {"tenant": "t", "principals": {"user": "x"}},
        {"tenant": "t", "principals": ["user:\u202eevil"]},
    ],
)
def test_bad_tokens_are_401(claims: dict[str, Any]) -> None:
    with pytest.raises(Unauthorized):
        _auth().identify(_token(claims))


def test_tokens_need_a_configured_key(tmp_path: Path) -> None:
    token = _token({"tenant": "t"})
    with pytest.raises(Unauthorized, match="no JWT key"):
        Authenticator(Settings(), NoKeys()).identify(token)  # type: ignore[arg-type]
    with pytest.raises(Unauthorized):
        _auth().identify(_token({"tenant": "t"}, key="y" * 40))
    for header in (None, "", "Basic abc", "Token x", "Bearer"):
        with pytest.raises(Unauthorized):
            _auth().identify(header)


# --- errors ------------------------------------------------------------------------------------
def test_errors_map_to_4xx_or_503_with_retry_after() -> None:
    assert error_status(Unauthorized("x"))[0] == 401
    assert error_status(Forbidden("x")) == (403, {})
    assert error_status(RateLimited(1.5)) == (429, {"Retry-After": "2"})
    assert error_status(OverloadedError("x")) == (503, {"Retry-After": "1"})
    assert error_status(EngineUnavailableError("x")) == (503, {"Retry-After": "5"})
    assert error_status(IndexContractError("x"))[0] == 503
    assert error_status(RequestTimeout("x"))[0] == 408
    for exc in (LimitError("x"), FilterError("x"), ConfigurationError("x")):
        assert error_status(exc) == (400, {})
    assert _snake("RateLimited") == "rate_limited" and _snake("FilterError") == "filter_error"


def test_key_ids_never_begin_with_a_dash() -> None:
    """An id the CLI must take as an argument (``es-rag keys revoke ID``) cannot look like
    an option; 4,000 draws would hold about 62 such ids if nothing prevented them."""
    from es_rag.serve.keys import new_key_id

    ids = [new_key_id() for _ in range(4000)]
    assert not [i for i in ids if i.startswith("-")]
    assert len(set(ids)) == len(ids) and all(len(i) == 20 for i in ids)
