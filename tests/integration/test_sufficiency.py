"""Weak-evidence refusal with the defaults: the quickstart's corpus, the real CLI, both engines.

Nothing is calibrated by hand: the index measures its own threshold on first use and keeps
it in its ``_meta``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from es_rag.acl import make_acl, make_caller
from es_rag.config import Settings
from es_rag.engine.client import Engine
from es_rag.query.context import ContextBuilder
from es_rag.query.search import Searcher
from es_rag.query.sufficiency import MIN_PROBES, PROBES, SPANS_PER_CHUNK, calibrate
from es_rag.types import Document
from tests.conftest import unique_index
from tests.integration.conftest import drop_alias
from tests.integration.test_cli import es_rag

pytestmark = pytest.mark.integration

SAMPLES = Path(__file__).resolve().parents[2] / "scripts" / "sample-docs"
ALICE = ("--tenant", "demo", "--as", "user:alice")


@pytest.fixture(scope="module")
def env(es_url: str, minilm_path: str, engine: Engine) -> Iterator[dict[str, str]]:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("ES_RAG_")},
        "ES_RAG_ES_URL": es_url,
        "ES_RAG_INDEX": unique_index("suff"),
        "ES_RAG_EMBEDDING_MODEL": minilm_path,
        "HF_HUB_OFFLINE": "1",
    }
    public = [str(p) for p in sorted(SAMPLES.iterdir()) if p.is_file()]
    for args in (
        ("ingest", *public, "--tenant", "demo", "--public"),
        ("ingest", str(SAMPLES / "restricted"), "--tenant", "demo", "--allow", "group:finance"),
    ):
        proc = es_rag(env, *args)
        assert proc.returncode == 0, proc.stderr
    yield env
    drop_alias(engine, env["ES_RAG_INDEX"])


def context(env: dict[str, str], question: str, *who: str) -> dict:
    proc = es_rag(env, "context", question, *(who or ALICE), "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_unanswerable_questions_are_refused_with_the_defaults(env: dict[str, str]) -> None:
    for question in (
        "What is the boiling point of liquid nitrogen on Mars?",
        "what is the capital of Australia?",
    ):
        out = context(env, question)
        assert out["sufficient"] is False, out["reason"]
        assert out["evidence"] == [] and "(no sources)" in out["prompt"]
    for question in ("how long does a refund take?", "daily allowance in Paris"):
        out = context(env, question)
        assert out["sufficient"] is True, out["reason"]
        assert out["evidence"] and out["signals"]["knn_threshold"] is not None
        assert out["signals"]["best_knn_score"] >= out["signals"]["knn_threshold"]


def builder(env: dict[str, str], engine: Engine, embedder, analyzer, **settings) -> ContextBuilder:  # type: ignore[no-untyped-def]
    """The same index in this process (no model load per question), with ``settings``."""
    base = Settings(
        es_url=env["ES_RAG_ES_URL"],
        index=env["ES_RAG_INDEX"],
        embedding_model=env["ES_RAG_EMBEDDING_MODEL"],
        **settings,
    )
    return ContextBuilder(Searcher(base, client=engine, embedder=embedder, analyzer=analyzer))


def test_what_a_caller_may_not_read_is_no_evidence(env, engine, embedder, analyzer) -> None:  # type: ignore[no-untyped-def]
    question = "how much did unrecovered refunds cost as a share of volume in Q3?"
    b = builder(env, engine, embedder, analyzer)
    bob = b.build(question, caller=make_caller("demo", users=["bob"], groups=["finance"]))
    assert bob.sufficient is True and "0.4%" in bob.prompt
    alice = b.build(question, caller=make_caller("demo", users=["alice"]))
    assert "0.4%" not in alice.prompt and "Q3 finance" not in alice.prompt


def test_calibration_is_kept_in_the_index_meta(env: dict[str, str], engine: Engine) -> None:
    context(env, "how long does a refund take?")  # measured on first use, if not yet
    proc = es_rag(env, "calibrate")
    assert proc.returncode == 0, proc.stderr
    first = json.loads(proc.stdout)
    assert first["model"].startswith("st:") and first["probes"] >= 8 and first["rows"] > 0
    # 17 chunks, fewer than the 64 probes: each is asked again for other spans of it
    assert first["rows"] < first["probes"] <= min(PROBES, SPANS_PER_CHUNK * first["rows"])
    assert first["knn_median"] <= first["knn_p90"] and first["knn_threshold"] is not None
    stored = engine.mapping(first["index"])["_meta"]["sufficiency"]
    assert stored["measured_at"] == first["measured_at"] and stored["rows"] == first["rows"]
    # another process reads it back instead of measuring again; --force measures again
    again = json.loads(es_rag(env, "calibrate").stdout)
    assert again["measured_at"] == first["measured_at"]
    assert again["recipe"] == first["recipe"] and "zscore" in first["recipe"]
    # another fusion returns other hits: a process using it measures its own background
    rrf = json.loads(es_rag({**env, "ES_RAG_FUSION": "rrf"}, "calibrate").stdout)
    assert rrf["measured_at"] > first["measured_at"] and "/rrf/" in rrf["recipe"]
    forced = json.loads(es_rag(env, "calibrate", "--force").stdout)
    assert forced["measured_at"] > first["measured_at"]
    assert forced["knn_median"] == pytest.approx(first["knn_median"], abs=1e-3)  # seeded
    # the index contract still reads (the calibration is one more _meta key)
    assert es_rag(env, "info").returncode == 0


def test_the_operating_point_is_a_setting(env, engine, embedder, analyzer) -> None:  # type: ignore[no-untyped-def]
    alice = make_caller("demo", users=["alice"])
    mars = "What is the boiling point of liquid nitrogen on Mars?"
    off = builder(env, engine, embedder, analyzer, sufficiency="off")
    assert off.build(mars, caller=alice).sufficient is True
    refund = "how long does a refund take?"
    strict = builder(env, engine, embedder, analyzer, sufficiency_strictness=50.0)
    verdict = strict.build(refund, caller=alice)
    assert verdict.sufficient is False and "below" in verdict.reason
    fixed = builder(env, engine, embedder, analyzer, min_knn_score=0.1)  # a fixed one wins
    verdict = fixed.build(mars, caller=alice)
    assert verdict.sufficient is True and "0.1" in verdict.reason


def test_a_tiny_index_has_no_dense_threshold(make_settings, ingestor_for, searcher_for) -> None:  # type: ignore[no-untyped-def]
    """Several spans a chunk steady a small index's percentiles, but three chunks asked
    four times each are still three chunks: no dense threshold, as with one span each."""
    settings = make_settings()
    ingestor = ingestor_for(settings)
    ingestor.init_index()
    texts = {
        "tides": "Tides rise and fall twice a day because the moon pulls on the oceans. "
        "Spring tides come when the sun and the moon line up with the earth.",
        "bread": "Bread rises because yeast turns sugar into carbon dioxide gas in the dough. "
        "A longer cold rise gives the loaf a deeper and more sour flavour.",
        "bees": "Honey bees tell each other where flowers are with a waggle dance in the hive. "
        "The angle of the dance points the way relative to the position of the sun.",
    }
    acl = make_acl("demo", public=True)
    ingestor.ingest_many(
        [Document(doc_id=k, text=v, acl=acl) for k, v in texts.items()], refresh=True
    )
    cal = calibrate(searcher_for(settings))
    assert cal.rows == 3 and 0 < cal.probes < MIN_PROBES
    assert cal.knn_threshold(1.1) is None
