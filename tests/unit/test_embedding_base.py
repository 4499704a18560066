"""The Embedder base class: batching, prefixes, normalisation, checks and fingerprint."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from pydantic import SecretStr

from es_rag.config import Settings
from es_rag.embedding import (
    Embedder,
    FlagEmbedder,
    Kind,
    OpenAIEmbedder,
    SentenceTransformerEmbedder,
    build_embedder,
)
from es_rag.errors import ConfigurationError, EmbeddingError

pytestmark = pytest.mark.unit


class HashEmbedder(Embedder):
    """Deterministic vectors from a hash of each text; records every batch it is handed."""

    backend = "hash"

    def __init__(self, *, width: int = 8, widths: list[int] | None = None, **kwargs: object):
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.width = width
        self.widths = widths  # per-call widths, to simulate a misbehaving backend
        self.calls: list[tuple[list[str], Kind]] = []

    def embed_batch(self, texts: list[str], *, kind: Kind) -> np.ndarray:
        width = self.widths[len(self.calls)] if self.widths else self.width
        self.calls.append((list(texts), kind))
        rows = []
        for text in texts:
            seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little")
            rows.append(np.random.default_rng(seed).normal(size=width) * 3.0)
        return np.asarray(rows, dtype=np.float64)


def make(**kwargs: object) -> HashEmbedder:
    kwargs.setdefault("model", "hash-model")
    return HashEmbedder(**kwargs)  # type: ignore[arg-type]


# --- batching -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("n", "batch_size", "sizes"),
    [(10, 4, [4, 4, 2]), (8, 4, [4, 4]), (3, 32, [3]), (1, 1, [1]), (5, 1, [1, 1, 1, 1, 1])],
)
def test_batches_split_in_order(n: int, batch_size: int, sizes: list[int]) -> None:
    emb = make(batch_size=batch_size)
    texts = [f"text {i}" for i in range(n)]
    out = emb.embed(texts)
    assert [len(batch) for batch, _ in emb.calls] == sizes
    assert [t for batch, _ in emb.calls for t in batch] == texts
    assert out.shape == (n, 8)
    assert out.dtype == np.float32
    # Each row belongs to its own text, whatever the batching.
    single = make(batch_size=1000).embed(texts)
    np.testing.assert_allclose(out, single, rtol=1e-6)


def test_batches_hold_texts_of_like_length_across_the_whole_call() -> None:
    """A batch is padded to its longest text: sorting only inside each batch (what the
    libraries do) leaves short texts padded to long ones of other documents."""
    texts = [("w " * n).strip() for n in (3, 40, 1, 25, 2, 39, 24, 4)]
    emb = make(batch_size=2)
    out = emb.embed(texts)
    lengths = [[len(t) for t in batch] for batch, _ in emb.calls]
    assert lengths == [[79, 77], [49, 47], [7, 5], [3, 1]]
    np.testing.assert_allclose(out, make(batch_size=1000).embed(texts), rtol=1e-6)
    for text, row in zip(texts, out, strict=True):  # each row is still its own text's
        np.testing.assert_allclose(row, make().embed([text])[0], rtol=1e-6)


def test_empty_input_makes_no_call() -> None:
    emb = make()
    out = emb.embed([])
    assert out.shape[0] == 0
    assert emb.calls == []


def test_a_bare_string_is_refused() -> None:
    with pytest.raises(TypeError):
        make().embed("not a list")


def test_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError):
        make().embed(["x"], kind="document")  # type: ignore[arg-type]


def test_non_str_item_is_refused() -> None:
    with pytest.raises(TypeError):
        make().embed(["ok", 3])  # type: ignore[list-item]


def test_invalid_batch_size() -> None:
    with pytest.raises(ConfigurationError):
        make(batch_size=0)


# --- prefixes -----------------------------------------------------------------------------------
def test_prefixes_applied_per_kind() -> None:
    emb = make(query_prefix="query: ", passage_prefix="passage: ")
    emb.embed(["a", "b"], kind="passage")
    emb.embed(["c"], kind="query")
    vec = emb.embed_query("d")
    assert emb.calls == [
        (["passage: a", "passage: b"], "passage"),
        (["query: c"], "query"),
        (["query: d"], "query"),
    ]
    assert isinstance(vec, list) and len(vec) == 8 and all(isinstance(x, float) for x in vec)


def test_default_kind_is_passage_and_empty_prefix_changes_nothing() -> None:
    emb = make()
    emb.embed(["a"])
    assert emb.calls == [(["a"], "passage")]


def test_prefix_changes_the_vector() -> None:
    plain = make().embed(["same"], kind="query")
    prefixed = make(query_prefix="query: ").embed(["same"], kind="query")
    assert not np.allclose(plain, prefixed)


# --- normalisation -----------------------------------------------------------------------------
def test_normalised_rows_have_unit_length() -> None:
    out = make(batch_size=3).embed([f"t{i}" for i in range(7)])
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-5)


def test_normalize_false_keeps_raw_vectors() -> None:
    emb = make(normalize=False)
    out = emb.embed(["t"])
    raw = HashEmbedder(model="m").embed_batch(["t"], kind="passage")
    np.testing.assert_allclose(out, raw.astype(np.float32), rtol=1e-6)
    assert abs(float(np.linalg.norm(out[0])) - 1.0) > 1e-3


def test_zero_vector_cannot_be_normalised() -> None:
    class Zero(Embedder):
        def embed_batch(self, texts: list[str], *, kind: Kind) -> np.ndarray:
            return np.zeros((len(texts), 4), dtype=np.float32)

    with pytest.raises(EmbeddingError, match="zero vector"):
        Zero(model="z").embed(["a"])
    assert Zero(model="z", normalize=False).embed(["a"]).shape == (1, 4)


# --- shape and value checks ------------------------------------------------------------------
def test_dims_mismatch_between_batches() -> None:
    emb = make(batch_size=2, widths=[8, 8, 6])
    with pytest.raises(EmbeddingError, match=r"6-d .* expected 8-d"):
        emb.embed([f"t{i}" for i in range(6)])


def test_dims_mismatch_across_calls() -> None:
    emb = make(widths=[8, 4])
    emb.embed(["a"])
    with pytest.raises(EmbeddingError, match="expected 8-d"):
        emb.embed(["b"])


def test_configured_dims_are_enforced() -> None:
    emb = make(dims=16)
    assert emb.dims == 16  # trusted without a probe ...
    assert emb.calls == []
    with pytest.raises(EmbeddingError, match="expected 16-d"):
        emb.embed(["a"])  # ... until the first batch disagrees


def test_wrong_row_count_and_nan_are_errors() -> None:
    class Short(Embedder):
        def embed_batch(self, texts: list[str], *, kind: Kind) -> np.ndarray:
            return np.ones((len(texts) - 1, 4), dtype=np.float32)

    class NaN(Embedder):
        def embed_batch(self, texts: list[str], *, kind: Kind) -> np.ndarray:
            return np.full((len(texts), 4), np.nan, dtype=np.float32)

    with pytest.raises(EmbeddingError, match="shape"):
        Short(model="s").embed(["a", "b"])
    with pytest.raises(EmbeddingError, match="NaN"):
        NaN(model="n").embed(["a"])


def test_library_errors_are_wrapped_with_cause() -> None:
    class Broken(Embedder):
        backend = "broken"

        def embed_batch(self, texts: list[str], *, kind: Kind) -> np.ndarray:
            raise RuntimeError("CUDA out of memory")

    with pytest.raises(EmbeddingError, match="CUDA out of memory") as info:
        Broken(model="b").embed(["a"])
    assert isinstance(info.value.__cause__, RuntimeError)


class StreamedHash(HashEmbedder):
    """A backend that embeds from several threads; records the thread of each batch."""

    def __init__(self, *, fail_on: str | None = None, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.fail_on = fail_on
        self.threads: list[str] = []
        self.lock = threading.Lock()

    def _prepare_streams(self) -> bool:
        return True

    def embed_batch(self, texts: list[str], *, kind: Kind) -> np.ndarray:
        if self.fail_on is not None and self.fail_on in texts:
            raise RuntimeError("broken batch")
        with self.lock:
            self.threads.append(threading.current_thread().name)
            return super().embed_batch(texts, kind=kind)


def test_streams_give_the_same_rows_in_the_same_order() -> None:
    texts = [f"text number {i} " * (i % 7 + 1) for i in range(50)]
    one = make(batch_size=4).embed(texts)
    streamed = StreamedHash(model="hash-model", batch_size=4, streams=3)
    out = streamed.embed(texts)
    np.testing.assert_array_equal(out, one)
    # the first batch on the caller's thread (it learns the width), the others on the streams
    assert streamed.threads[0] == threading.current_thread().name
    assert {t for t in streamed.threads[1:]} <= {f"es-rag-embed_{i}" for i in range(3)}
    assert len(streamed.threads) == 13
    # later calls deal every batch to the streams: the caller's thread would run one alone
    streamed.threads.clear()
    np.testing.assert_array_equal(streamed.embed(texts), one)
    assert len(streamed.threads) == 13
    assert set(streamed.threads) <= {f"es-rag-embed_{i}" for i in range(3)}


def test_a_short_call_and_a_backend_without_streams_embed_on_the_callers_thread() -> None:
    short = StreamedHash(model="hash-model", batch_size=4, streams=2)
    short.embed([f"t{i}" for i in range(8)])  # two batches: nothing to share out
    assert set(short.threads) == {threading.current_thread().name}
    assert short._pool is None

    plain = make(batch_size=2, streams=4)  # the base class says no: one batch at a time
    plain.embed([f"t{i}" for i in range(9)])
    assert plain.streams == 1 and plain._pool is None
    assert len(plain.calls) == 5


def test_a_failing_batch_in_a_stream_names_its_texts() -> None:
    texts = [f"text {i:02d}" for i in range(12)]
    broken = StreamedHash(model="hash-model", batch_size=3, streams=2, fail_on="text 07")
    with pytest.raises(EmbeddingError, match=r"texts \d+\.\.\d+.*broken batch"):
        broken.embed(texts)


def test_invalid_streams() -> None:
    with pytest.raises(ConfigurationError, match="streams"):
        make(streams=0)
    with pytest.raises(ValueError):
        Settings(embedding_streams=0)


def run_child(code: str, model_path: str) -> None:
    """Run ``code`` (which ends by printing ok) in a fresh interpreter: streams set the
    process's math threads, which must not leak into the other tests."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run(
        [sys.executable, "-c", code, model_path], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-2000:]


def test_a_local_model_in_streams_gives_the_vectors_of_one_stream(minilm_path: str) -> None:
    """Real all-MiniLM-L6-v2 through sentence-transformers, in a child process."""
    code = (
        "import sys, numpy as np, torch\n"
        "from es_rag.embedding import SentenceTransformerEmbedder as E\n"
        "texts = [('passage %d about ' % i) + 'flow ' * (i % 23) for i in range(70)]\n"
        "one = E(model=sys.argv[1], device='cpu', batch_size=8).embed(texts)\n"
        "threads = torch.get_num_threads()\n"
        "two = E(model=sys.argv[1], device='cpu', batch_size=8, streams=2)\n"
        "out = two.embed(texts)\n"
        "assert two._pool is not None, 'no streams'\n"
        "assert torch.get_num_threads() == max(1, threads // 2), torch.get_num_threads()\n"
        "np.testing.assert_allclose(out, one, atol=2e-5)\n"
        "# the second call starts every batch on the streams, the tokenizer shared from the start\n"
        "for _ in range(3):\n"
        "    np.testing.assert_allclose(two.embed(texts), one, atol=2e-5)\n"
        "print('ok')\n"
    )
    run_child(code, minilm_path)


def test_more_streams_than_math_threads_are_cut_to_the_threads(minilm_path: str) -> None:
    """A stream per thread at most, each with at least one: more would time-slice the cores
    (and set torch to zero threads). Real MiniLM in a child process, as above."""
    code = (
        "import sys, torch\n"
        "from es_rag.embedding import SentenceTransformerEmbedder as E\n"
        "texts = ['passage %d ' % i + 'word ' * (i % 11) for i in range(40)]\n"
        "torch.set_num_threads(2)\n"
        "many = E(model=sys.argv[1], device='cpu', batch_size=4, streams=5)\n"
        "many.embed(texts)\n"
        "assert many.streams == 2 and many._pool._max_workers == 2, many.streams\n"
        "assert torch.get_num_threads() == 1, torch.get_num_threads()\n"
        "lone = E(model=sys.argv[1], device='cpu', batch_size=4, streams=3)\n"
        "lone.embed(texts)  # one math thread left: one stream, on the caller's thread\n"
        "assert lone.streams == 1 and lone._pool is None, lone.streams\n"
        "print('ok')\n"
    )
    run_child(code, minilm_path)


def test_ingesting_commands_default_to_a_stream_per_math_thread() -> None:
    from es_rag.cli.common import MAX_DEFAULT_STREAMS, ingest_streams

    assert ingest_streams(Settings(), 2).embedding_streams == 2
    assert ingest_streams(Settings(), 0).embedding_streams == 1
    assert ingest_streams(Settings(), 64).embedding_streams == MAX_DEFAULT_STREAMS
    # the user's choice wins, from the environment or given
    assert ingest_streams(Settings(embedding_streams=1), 4).embedding_streams == 1
    os.environ["ES_RAG_EMBEDDING_STREAMS"] = "3"
    try:
        assert ingest_streams(Settings(), 2).embedding_streams == 3
    finally:
        del os.environ["ES_RAG_EMBEDDING_STREAMS"]


def test_inline_ingest_embeds_in_streams_and_queued_ingest_does_not(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The CLI's wiring only (the streams themselves are tested above): the settings the
    ingest command builds its Ingestor with, stopped right there."""
    from typer.testing import CliRunner

    import es_rag.pipeline
    from es_rag.cli import app

    seen: list[int] = []

    class Stop(Exception):
        pass

    def capture(settings: Settings) -> None:
        seen.append(settings.embedding_streams)
        raise Stop

    monkeypatch.setattr(es_rag.pipeline, "Ingestor", capture)
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    monkeypatch.delenv("ES_RAG_EMBEDDING_STREAMS", raising=False)
    note = tmp_path / "note.md"
    note.write_text("# A note\n\nSome text.\n")
    runner = CliRunner()
    for extra in ([], ["--queue"]):
        result = runner.invoke(app, ["ingest", str(note), "--tenant", "t", "--public", *extra])
        assert isinstance(result.exception, Stop), result.output
    assert seen == [2, 1]


def test_dims_probe_is_lazy_and_single() -> None:
    emb = make(width=12)
    assert emb.calls == []
    assert emb.dims == 12
    assert emb.dims == 12
    assert len(emb.calls) == 1


# --- fingerprint --------------------------------------------------------------------------------
def test_version_is_stable_and_short() -> None:
    a = make(query_prefix="query: ", passage_prefix="passage: ")
    b = make(query_prefix="query: ", passage_prefix="passage: ")
    assert a.embedding_version == b.embedding_version
    assert a.embedding_version == a.embedding_version
    assert a.embedding_version.startswith("hash:hash-model:8:norm:")
    assert len(a.embedding_version) < 100


def test_version_sensitive_to_what_changes_vectors() -> None:
    base = make().embedding_version
    variants = [
        make(model="other-model"),
        make(query_prefix="query: "),
        make(passage_prefix="passage: "),
        make(normalize=False),
        make(width=16),
    ]
    versions = {v.embedding_version for v in variants}
    assert base not in versions
    assert len(versions) == len(variants)
    # Swapping the two prefixes is a different embedding too.
    assert (
        make(query_prefix="x", passage_prefix="").embedding_version
        != make(query_prefix="", passage_prefix="x").embedding_version
    )


def test_long_prefix_is_hashed() -> None:
    instruction = "Represent this sentence for searching relevant passages: "
    version = make(query_prefix=instruction).embedding_version
    assert instruction not in version
    assert version != make(query_prefix=instruction + " ").embedding_version


def test_version_is_stable_across_processes() -> None:
    code = (
        "from tests.unit.test_embedding_base import make;"
        "print(make(query_prefix='query: ', passage_prefix='passage: ').embedding_version)"
    )
    repo_root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=repo_root
    ).stdout.strip()
    assert out == make(query_prefix="query: ", passage_prefix="passage: ").embedding_version


def test_folder_fingerprint_follows_content(tmp_path: Path) -> None:
    from es_rag.embedding.local import _folder_fingerprint

    folder = tmp_path / "a"
    folder.mkdir()
    (folder / "config.json").write_text('{"hidden_size": 8}')
    (folder / "model.safetensors").write_bytes(b"weights")
    (folder / "README.md").write_text("docs do not count")
    first = _folder_fingerprint(folder)
    (folder / "README.md").write_text("edited docs")
    assert _folder_fingerprint(folder) == first
    copy = tmp_path / "b"
    copy.mkdir()
    (copy / "config.json").write_text('{"hidden_size": 8}')
    (copy / "model.safetensors").write_bytes(b"weights")
    assert _folder_fingerprint(copy) == first  # location-independent
    (folder / "model.safetensors").write_bytes(b"weights2")
    assert _folder_fingerprint(folder) != first
    assert len(first) == 12


# --- construction is free ---------------------------------------------------------------------
def test_build_embedder_backends_without_io() -> None:
    st = build_embedder(Settings(embedding_model="/nonexistent/model"))
    assert isinstance(st, SentenceTransformerEmbedder)
    flag = build_embedder(Settings(embedding_backend="flag", embedding_batch_size=7))
    assert isinstance(flag, FlagEmbedder) and flag.batch_size == 7
    assert flag.model == "BAAI/bge-m3"
    oa = build_embedder(
        Settings(
            embedding_backend="openai",
            embedding_url="http://127.0.0.1:1/v1/",
            embedding_api_key=SecretStr("sk-test"),
            embedding_dims=384,
        )
    )
    assert isinstance(oa, OpenAIEmbedder)
    assert oa.endpoint == "http://127.0.0.1:1/v1/embeddings"
    assert oa.dims == 384


@pytest.mark.parametrize(
    ("url", "endpoint"),
    [
        ("http://h:8000", "http://h:8000/v1/embeddings"),
        ("http://h:8000/", "http://h:8000/v1/embeddings"),
        ("http://h:8000/v1", "http://h:8000/v1/embeddings"),
        ("http://h:8000/v1/embeddings", "http://h:8000/v1/embeddings"),
        ("https://h/proxy/v1/", "https://h/proxy/v1/embeddings"),
    ],
)
def test_openai_endpoint_normalisation(url: str, endpoint: str) -> None:
    assert OpenAIEmbedder(model="m", url=url).endpoint == endpoint


def test_openai_input_type_replaces_prefixes_in_version() -> None:
    with_it = OpenAIEmbedder(model="m", url="http://h", dims=4, query_prefix="query: ")
    without = OpenAIEmbedder(
        model="m", url="http://h", dims=4, query_prefix="query: ", input_type=False
    )
    assert with_it.embedding_version == "openai:m:4:norm:it"
    assert 'q="query: "' in without.embedding_version


def test_retry_after_parsing() -> None:
    from es_rag.embedding.remote import _retry_after_seconds

    assert _retry_after_seconds("3") == 3.0
    assert _retry_after_seconds(None) is None
    assert _retry_after_seconds("garbage") is None
    assert _retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0


def test_a_local_model_fingerprint_is_remembered_across_processes(
    minilm_path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process with nothing to embed (a re-ingest of unchanged files) must not load the
    model to learn its fingerprint; a changed setting or model file is a new key."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    first = SentenceTransformerEmbedder(model=minilm_path)
    version = first.embedding_version
    assert first.loaded
    again = SentenceTransformerEmbedder(model=minilm_path)
    assert (again.embedding_version, again.dims) == (version, 384)
    assert not again.loaded
    # A setting that changes the vectors is another key: this one loads and differs.
    other = SentenceTransformerEmbedder(model=minilm_path, query_prefix="query: ")
    assert other.embedding_version != version and other.loaded
    # So is an edited model folder (a file's size or time), e.g. a copy with a new config.
    copy = tmp_path / "model"
    shutil.copytree(minilm_path, copy)
    moved = SentenceTransformerEmbedder(model=str(copy))
    assert moved.embedding_version == version and moved.loaded  # same bytes, new key
    config = copy / "config.json"
    stat = config.stat()
    os.utime(config, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    touched = SentenceTransformerEmbedder(model=str(copy))
    assert touched.embedding_version == version and touched.loaded
    # Promised dims are checked by a real batch, never taken from (or written to) memory.
    promised = SentenceTransformerEmbedder(model=minilm_path, dims=512)
    assert promised.embedding_version != version and promised.loaded
    with pytest.raises(EmbeddingError):
        promised.embed(["x"])
    later = SentenceTransformerEmbedder(model=minilm_path)
    assert (later.embedding_version, later.dims, later.loaded) == (version, 384, False)


def test_an_unset_batch_size_is_chosen_by_where_the_model_runs() -> None:
    from es_rag.embedding.local import auto_batch_size

    assert auto_batch_size("cpu") == 16
    on_cpu = build_embedder(Settings(embedding_model="/nonexistent/model", device="cpu"))
    assert on_cpu.batch_size is None and on_cpu.effective_batch_size() == 16
    # on a GPU the size is measured with the loaded model: a model that cannot load says so
    on_gpu = build_embedder(Settings(embedding_model="/nonexistent/model", device="cuda:1"))
    with pytest.raises(EmbeddingError):
        on_gpu.effective_batch_size()
    onnx = build_embedder(Settings(embedding_model="/nonexistent/model", embedding_runtime="onnx"))
    assert onnx.effective_batch_size() == 16  # ONNX Runtime runs on the CPU
    server = build_embedder(
        Settings(embedding_backend="openai", embedding_url="http://127.0.0.1:1/v1/")
    )
    assert server.effective_batch_size() == 32  # texts per request
    chosen = build_embedder(Settings(embedding_model="/x", device="cuda", embedding_batch_size=7))
    assert chosen.effective_batch_size() == 7


def test_a_batch_size_probe_keeps_the_smallest_size_near_the_fastest() -> None:
    from es_rag.embedding.autobatch import choose_batch_size

    # texts/s rises to a plateau: 16 -> 800/s, 32 -> 1500/s, 64 -> 2400/s, 128 -> 2460/s
    rates = {16: 800.0, 32: 1500.0, 64: 2400.0, 128: 2460.0, 256: 2500.0}
    tried: list[int] = []

    def seconds_for(size: int) -> float:
        tried.append(size)
        return size / rates[size]

    choice = choose_batch_size(seconds_for, (16, 32, 64, 128, 256))
    assert tried == [16, 32, 64, 128]  # 128 was not 5% faster than 64: no need to try 256
    assert choice.size == 64 and "not 5% faster" in choice.stopped
    assert choice.as_dict()["rates"] == {"16": 800.0, "32": 1500.0, "64": 2400.0, "128": 2460.0}


def test_a_batch_size_probe_stops_at_the_first_size_that_does_not_fit() -> None:
    from es_rag.embedding.autobatch import choose_batch_size

    class OutOfMemoryError(RuntimeError):  # torch.cuda.OutOfMemoryError's name and base
        pass

    freed: list[bool] = []

    def seconds_for(size: int) -> float:
        if size >= 128:
            try:
                raise OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
            except OutOfMemoryError as exc:  # libraries re-raise it wrapped
                raise RuntimeError("forward failed") from exc
        return size / (100.0 * size)  # still faster at every size

    choice = choose_batch_size(seconds_for, after_oom=lambda: freed.append(True))
    assert choice.size == 64 and freed == [True]
    assert choice.stopped == "128 texts ran out of memory"
    # the smallest size failing, or any other error, is the caller's to see
    with pytest.raises(RuntimeError, match="forward failed"):
        choose_batch_size(lambda size: seconds_for(size * 8), (16, 32))
    with pytest.raises(ValueError, match="boom"):
        choose_batch_size(lambda size: (_ for _ in ()).throw(ValueError("boom")))
    with pytest.raises(ValueError, match="ascending"):
        choose_batch_size(seconds_for, (32, 16))


def test_a_batch_size_probe_keeps_to_its_time_budget() -> None:
    from es_rag.embedding.autobatch import choose_batch_size

    now = [0.0]

    def seconds_for(size: int) -> float:
        now[0] += 20.0  # each size takes 20 s of the wall clock
        return size / (10.0 * size)

    choice = choose_batch_size(seconds_for, budget_s=30.0, clock=lambda: now[0])
    assert list(choice.rates) == [16, 32] and "30 s" in choice.stopped
