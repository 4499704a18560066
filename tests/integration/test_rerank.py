"""Rerankers end to end on a real (tiny) cross-encoder, through both libraries.

No registry package ships reranker weights, so the session builds a 2-layer BERT
sequence classifier with a fixed seed, saves it with MiniLM's real tokenizer, and loads it
through FlagEmbedding's FlagReranker and sentence-transformers' CrossEncoder exactly as a
production folder would be. Its weights are random, so nothing here asks for *good*
rankings; every check compares against an independent computation (a plain transformers
forward pass, the library's own entry point, another batch size, the other backend).
No search server is needed.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"  # before any transformers import: no hub in tests

import pytest

from es_rag.config import Settings
from es_rag.errors import ConfigurationError, RerankError
from es_rag.query.rerank import (
    CrossEncoderReranker,
    FlagReranker,
    Reranker,
    build_reranker,
)

pytestmark = pytest.mark.integration

QUERY = "how do cats see in the dark"
# Different lengths on purpose: padding inside a batch must not change any score.
PASSAGES = [
    f"passage {i}: "
    + " ".join(["cats have a reflective layer behind the retina"] * (i % 5))
    + (" dogs bark" if i % 3 else "")
    for i in range(23)
]
TOL = 1e-4


@pytest.fixture(scope="session")
def reference_scores(tiny_reranker_path: str) -> list[float]:
    """Logits of a plain transformers forward pass, one unpadded pair at a time."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_reranker_path)
    model = AutoModelForSequenceClassification.from_pretrained(tiny_reranker_path).eval()
    scores = []
    with torch.inference_mode():
        for passage in PASSAGES:
            inputs = tokenizer(QUERY, passage, truncation=True, max_length=512, return_tensors="pt")
            scores.append(float(model(**inputs).logits.view(-1)[0]))
    return scores


@pytest.fixture(scope="module")
def flag(tiny_reranker_path: str) -> FlagReranker:
    return FlagReranker(model=tiny_reranker_path, batch_size=4, device="cpu")


@pytest.fixture(scope="module")
def cross(tiny_reranker_path: str) -> CrossEncoderReranker:
    return CrossEncoderReranker(model=tiny_reranker_path, batch_size=4, device="cpu")


def assert_close(got: list[float], want: list[float], tol: float = TOL) -> None:
    assert len(got) == len(want)
    worst = max(abs(g - w) for g, w in zip(got, want, strict=True))
    assert worst <= tol, f"max |difference| {worst:.2e} > {tol:.0e}\n got {got}\nwant {want}"


def test_the_tiny_model_discriminates(reference_scores: list[float]) -> None:
    # Guards the other tests: with near-constant scores, order checks would prove nothing.
    assert max(reference_scores) - min(reference_scores) > 1.0
    assert len({round(s, 3) for s in reference_scores}) == len(reference_scores)


# --- (a) scores are the model's logits ------------------------------------------------------------
@pytest.mark.parametrize("backend", ["flag", "cross"])
def test_scores_equal_a_direct_forward_pass(
    backend: str, request: pytest.FixtureRequest, reference_scores: list[float]
) -> None:
    reranker: Reranker = request.getfixturevalue(backend)
    scores = reranker.score(QUERY, PASSAGES)
    assert all(isinstance(s, float) for s in scores)
    # Raw logits, no sigmoid: a sigmoid would squash these (spread > 1) into (0, 1).
    assert_close(scores, reference_scores)


def test_flag_equals_the_library_compute_score(flag: FlagReranker) -> None:
    """Our single-pass path reproduces FlagReranker.compute_score (which we bypass)."""
    pairs = [(QUERY, p) for p in PASSAGES]
    library = flag._get_model().compute_score(pairs, batch_size=64, normalize=False)
    assert_close(flag.score(QUERY, PASSAGES), [float(s) for s in library])
    # And compute_score(normalize=True) is just the sigmoid of those logits.
    import math

    normalised = flag._get_model().compute_score(pairs[:3], batch_size=64, normalize=True)
    assert_close([float(s) for s in normalised], [1 / (1 + math.exp(-s)) for s in library[:3]])


def test_cross_encoder_equals_the_library_predict(cross: CrossEncoderReranker) -> None:
    """Identity activation: predict()'s default for one label would be a sigmoid."""
    import torch

    ce = cross._get_model()
    pairs = [(QUERY, p) for p in PASSAGES]
    raw = ce.predict(pairs, activation_fn=torch.nn.Identity(), show_progress_bar=False)
    assert_close(cross.score(QUERY, PASSAGES), raw.tolist())
    default = ce.predict(pairs[:3], activation_fn=torch.nn.Sigmoid(), show_progress_bar=False)
    assert all(0.0 < s < 1.0 for s in default.tolist())


# --- (b) batching ---------------------------------------------------------------------------------
@pytest.mark.parametrize("cls", [FlagReranker, CrossEncoderReranker])
def test_batch_size_does_not_change_scores_or_order(
    cls: type[FlagReranker] | type[CrossEncoderReranker], tiny_reranker_path: str
) -> None:
    one = cls(model=tiny_reranker_path, batch_size=1, device="cpu").score(QUERY, PASSAGES)
    big = cls(model=tiny_reranker_path, batch_size=64, device="cpu").score(QUERY, PASSAGES)
    # Padding in a 23-pair batch versus none: only float noise may differ.
    assert_close(one, big, tol=1e-5)
    # Input order: reversing the passages reverses the scores.
    reranker = cls(model=tiny_reranker_path, batch_size=5, device="cpu")
    backwards = reranker.score(QUERY, list(reversed(PASSAGES)))
    assert_close(list(reversed(backwards)), big, tol=1e-5)


def test_batches_call_score_batch_in_order(tiny_reranker_path: str) -> None:
    calls: list[list[tuple[str, str]]] = []

    class Recording(Reranker):
        def score_batch(self, pairs: list[tuple[str, str]]) -> list[float]:
            calls.append(pairs)
            return [float(len(p)) for _, p in pairs]

    scores = Recording(model="x", batch_size=10).score(QUERY, PASSAGES)
    assert [len(c) for c in calls] == [10, 10, 3]
    assert [p for c in calls for _, p in c] == PASSAGES
    assert all(q == QUERY for c in calls for q, _ in c)
    assert scores == [float(len(p)) for p in PASSAGES]


# --- (c) the two backends agree -------------------------------------------------------------------
def test_backends_agree_on_the_same_model(flag: FlagReranker, cross: CrossEncoderReranker) -> None:
    assert_close(flag.score(QUERY, PASSAGES), cross.score(QUERY, PASSAGES))


def test_backends_differ_on_long_queries(tiny_reranker_path: str) -> None:
    """Documented divergence: FlagReranker cuts the query to 3/4 of max_length by itself,
    CrossEncoder truncates query and passage together (longest first)."""
    long_query = " ".join(["night vision"] * 40)  # ~80 tokens
    passage = " ".join(["cats"] * 40)
    flag = FlagReranker(model=tiny_reranker_path, max_length=64, device="cpu")
    cross = CrossEncoderReranker(model=tiny_reranker_path, max_length=64, device="cpu")
    a, b = flag.score(long_query, [passage])[0], cross.score(long_query, [passage])[0]
    assert abs(a - b) > TOL
    # Short inputs still agree under the same max_length.
    assert_close(flag.score(QUERY, PASSAGES[:4]), cross.score(QUERY, PASSAGES[:4]))


# --- (d) failures ---------------------------------------------------------------------------------
@pytest.mark.parametrize("cls", [FlagReranker, CrossEncoderReranker])
def test_missing_model_folder_is_a_clear_rerank_error(
    cls: type[FlagReranker] | type[CrossEncoderReranker], tmp_path: Path
) -> None:
    missing_folder = str(tmp_path / "no-such-reranker")
    reranker = cls(model=missing_folder, device="cpu")  # building is free: no error yet
    with pytest.raises(RerankError, match="does not exist") as info:
        reranker.score(QUERY, ["a passage"])
    assert missing_folder in str(info.value)
    with pytest.raises(RerankError, match="does not exist"):
        reranker.load()


@pytest.mark.parametrize("cls", [FlagReranker, CrossEncoderReranker])
def test_unknown_hub_name_offline_is_a_rerank_error(
    cls: type[FlagReranker] | type[CrossEncoderReranker],
) -> None:
    reranker = cls(model="es-rag-tests/no-such-reranker", device="cpu")
    with pytest.raises(RerankError, match=r"cannot load .*no-such-reranker") as info:
        reranker.score(QUERY, ["a passage"])
    assert info.value.__cause__ is not None


def test_folder_without_config_is_a_rerank_error(tmp_path: Path) -> None:
    with pytest.raises(RerankError, match=r"no config\.json"):
        FlagReranker(model=str(tmp_path), device="cpu").score(QUERY, ["a passage"])


def test_library_failures_are_wrapped_with_their_cause(tiny_reranker_path: str) -> None:
    class Broken(Reranker):
        def score_batch(self, pairs: list[tuple[str, str]]) -> list[float]:
            raise RuntimeError("CUDA out of memory")

    with pytest.raises(RerankError, match=r"passages 0\.\.1 .*RuntimeError: CUDA out of memory"):
        Broken(model="m").score(QUERY, ["a", "b"])


def test_bad_backend_output_is_caught() -> None:
    class Short(Reranker):
        def score_batch(self, pairs: list[tuple[str, str]]) -> list[float]:
            return [0.0] * (len(pairs) - 1)

    class NaN(Reranker):
        def score_batch(self, pairs: list[tuple[str, str]]) -> list[float]:
            return [float("nan")] * len(pairs)

    with pytest.raises(RerankError, match="1 scores for 2 pairs"):
        Short(model="m").score(QUERY, ["a", "b"])
    with pytest.raises(RerankError, match="NaN"):
        NaN(model="m").score(QUERY, ["a", "b"])


def test_time_budget_is_checked_between_batches() -> None:
    class Slow(Reranker):
        def score_batch(self, pairs: list[tuple[str, str]]) -> list[float]:
            time.sleep(0.05)
            return [0.0] * len(pairs)

    with pytest.raises(RerankError, match=r"ran out of time.*after 2 of 6"):
        Slow(model="m", batch_size=2, timeout=0.01).score(QUERY, ["p"] * 6)
    assert Slow(model="m", batch_size=2, timeout=5).score(QUERY, ["p"] * 6) == [0.0] * 6


def test_inputs_are_checked_and_empty_input_loads_nothing(tmp_path: Path) -> None:
    reranker = FlagReranker(model=str(tmp_path / "absent"), device="cpu")
    assert reranker.score(QUERY, []) == []  # would raise if it tried to load the model
    with pytest.raises(TypeError, match="not one string"):
        reranker.score(QUERY, "a passage")
    with pytest.raises(TypeError, match="passage #1"):
        reranker.score(QUERY, ["ok", 3])  # type: ignore[list-item]
    with pytest.raises(ConfigurationError):
        FlagReranker(model="m", batch_size=0)
    with pytest.raises(ConfigurationError):
        CrossEncoderReranker(model="m", timeout=0)


# --- (e) build_reranker ---------------------------------------------------------------------------
def test_build_reranker_from_settings() -> None:
    assert build_reranker(Settings(rerank_model=None)) is None
    assert build_reranker(Settings(rerank_model="")) is None
    assert build_reranker(Settings(rerank_model="  ")) is None

    flag = build_reranker(
        Settings(
            rerank_model="BAAI/bge-reranker-v2-m3",
            rerank_batch_size=8,
            rerank_max_length=256,
            rerank_timeout=2.5,
            rerank_fp16=False,
            device="cpu",
        )
    )
    assert isinstance(flag, FlagReranker)  # "flag" is the default backend
    assert (flag.model, flag.batch_size, flag.max_length) == ("BAAI/bge-reranker-v2-m3", 8, 256)
    assert (flag.timeout, flag.use_fp16, flag.device) == (2.5, False, "cpu")
    assert flag.name == "flag:BAAI/bge-reranker-v2-m3"
    assert not flag.loaded  # nothing loaded, nothing downloaded

    cross = build_reranker(Settings(rerank_model="some/model", rerank_backend="cross-encoder"))
    assert isinstance(cross, CrossEncoderReranker)
    assert cross.name == "cross-encoder:some/model"
    assert (cross.batch_size, cross.max_length, cross.timeout) == (16, 512, 10.0)


def test_settings_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ES_RAG_RERANK_MODEL", "/models/bge-reranker-v2-m3")
    monkeypatch.setenv("ES_RAG_RERANK_BACKEND", "cross-encoder")
    monkeypatch.setenv("ES_RAG_RERANK_K", "5")
    settings = Settings()
    assert settings.rerank_window == 50 and settings.rerank_k == 5 and settings.rerank_fp16
    assert isinstance(build_reranker(settings), CrossEncoderReranker)
    monkeypatch.setenv("ES_RAG_RERANK_BACKEND", "colbert")
    with pytest.raises(ValueError, match="rerank_backend"):
        Settings()


# --- timing (reported, loosely bounded) -----------------------------------------------------------
@pytest.mark.parametrize("cls", [FlagReranker, CrossEncoderReranker])
def test_fifty_candidates_time(
    cls: type[FlagReranker] | type[CrossEncoderReranker], tiny_reranker_path: str
) -> None:
    reranker = cls(model=tiny_reranker_path, device="cpu")  # batch_size 16: 4 batches
    candidates = [PASSAGES[i % len(PASSAGES)] + f" #{i}" for i in range(50)]
    reranker.load()  # outside the measurement
    assert reranker.loaded
    start = time.perf_counter()
    scores = reranker.score(QUERY, candidates)
    elapsed = time.perf_counter() - start
    print(f"\n{reranker.name}: 50 candidates in {elapsed * 1000:.1f} ms")
    assert len(scores) == 50
    assert elapsed < 10.0  # the default rerank_timeout, with a tiny model on any CPU


@pytest.fixture(scope="session")
def two_label_path(minilm_path: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A real sequence classifier, but with two labels (an NLI-style head)."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    tokenizer = AutoTokenizer.from_pretrained(minilm_path)
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        num_labels=2,
    )
    torch.manual_seed(1234)
    folder = tmp_path_factory.mktemp("two-labels")
    BertForSequenceClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


@pytest.mark.parametrize("cls", [FlagReranker, CrossEncoderReranker])
def test_a_bi_encoder_folder_is_refused_at_load(
    cls: type[FlagReranker] | type[CrossEncoderReranker], minilm_path: str
) -> None:
    # MiniLM is a plain BertModel: both libraries would load it with a random head, and
    # CrossEncoder would make that head 1-label, giving plausible-looking random scores.
    with pytest.raises(RerankError, match=r"not a cross-encoder.*BertModel"):
        cls(model=minilm_path, device="cpu").score(QUERY, ["a passage"])


@pytest.mark.parametrize("cls", [FlagReranker, CrossEncoderReranker])
def test_a_two_label_classifier_is_refused_at_load(
    cls: type[FlagReranker] | type[CrossEncoderReranker], two_label_path: str
) -> None:
    with pytest.raises(RerankError, match="2 output labels; a reranker needs exactly 1"):
        cls(model=two_label_path, device="cpu").score(QUERY, ["a passage"])
