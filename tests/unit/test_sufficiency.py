"""The weak-evidence judge's pure parts: probes, the calibration's numbers, the decision."""

from __future__ import annotations

import random

import pytest

from es_rag.config import Settings
from es_rag.query import sufficiency as suf

pytestmark = pytest.mark.unit
DEFAULTS = {
    "strictness": Settings().sufficiency_strictness,
    "min_coverage": Settings().sufficiency_min_coverage,
}


def calibration(values: list[float], *, rows: int = 100, model: str = "m") -> suf.Calibration:
    return suf.from_probes([{"best_knn": v} for v in values], model=model, rows=rows)


def test_threshold_sits_between_the_probes_median_and_90th_percentile() -> None:
    cal = calibration([0.60 + 0.01 * i for i in range(11)])  # 0.60 … 0.70
    assert cal.knn_median == pytest.approx(0.65)
    assert cal.knn_p90 == pytest.approx(0.69)
    assert cal.knn_threshold(0.0) == pytest.approx(0.65)
    assert cal.knn_threshold(1.0) == pytest.approx(0.69)
    assert cal.knn_threshold(1.5) == pytest.approx(0.71)  # stricter: above every probe


def test_too_few_probes_give_no_dense_threshold() -> None:
    cal = calibration([0.7] * (suf.MIN_PROBES - 1))
    assert cal.knn_threshold(1.1) is None
    verdict = suf.decide({"best_knn": 0.2, "coverage": 0.9}, cal, **DEFAULTS)
    assert verdict.sufficient and "lexical check only" in verdict.reason


def test_decision_needs_coverage_and_the_calibrated_similarity() -> None:
    cal = calibration([0.60 + 0.01 * i for i in range(11)])
    t = cal.knn_threshold(DEFAULTS["strictness"])
    assert t is not None
    assert suf.decide({"best_knn": t + 0.01, "coverage": 0.5}, cal, **DEFAULTS).sufficient
    low = suf.decide({"best_knn": t - 0.01, "coverage": 0.5}, cal, **DEFAULTS)
    assert not low.sufficient and "below" in low.reason and low.knn_threshold == t
    bare = suf.decide({"best_knn": 0.99, "coverage": 0.05}, cal, **DEFAULTS)
    assert not bare.sufficient and "terms" in bare.reason
    # the operating point is a setting: a lower strictness accepts what the default refuses
    assert suf.decide(
        {"best_knn": t - 0.01, "coverage": 0.5}, cal, strictness=0.5, min_coverage=0.1
    ).sufficient
    assert not suf.decide(
        {"best_knn": 0.99, "coverage": 0.3}, cal, strictness=1.1, min_coverage=0.4
    ).sufficient


def test_question_without_content_terms_is_not_refused_for_coverage() -> None:
    assert suf.decide({"best_knn": None, "coverage": None}, None, **DEFAULTS).sufficient


def test_calibration_goes_stale_with_the_model_recipe_or_a_much_changed_index() -> None:
    from es_rag.config import Settings

    recipe = suf.recipe_of(Settings())
    # z-score fusion reads BM25 as logarithms since 2026-12-06: a calibration recorded under
    # the plain z-score ("auto/zscore/...") is another recipe, measured again
    assert "/zscore+log(bm25)/" in recipe
    cal = suf.from_probes([{"best_knn": 0.7}] * 20, model="a", rows=1000, recipe=recipe)
    assert cal.stale(model="a", rows=1500, recipe=recipe) is None
    assert "model" in (cal.stale(model="b", rows=1000, recipe=recipe) or "")
    assert "1000 to 2500" in (cal.stale(model="a", rows=2500, recipe=recipe) or "")
    assert cal.stale(model="a", rows=400, recipe=recipe) is not None
    # Another fusion or candidate count returns other hits: the background is measured again.
    for changed in (
        Settings(fusion="rrf"),
        Settings(context_candidates=20),
        Settings(feedback_chunks=0 if Settings().feedback_chunks else 3),
    ):
        other = suf.recipe_of(changed)
        assert other != recipe
        assert "recipe" in (cal.stale(model="a", rows=1000, recipe=other) or "")
    again = suf.Calibration.from_meta(cal.to_meta())
    assert again.knn_threshold(1.1) == pytest.approx(cal.knn_threshold(1.1) or 0, abs=1e-3)
    assert again.stale(model="a", rows=1000, recipe=recipe) is None
    old = {**cal.to_meta(), "version": 0}
    assert suf.Calibration.from_meta(old).stale(model="a", rows=1000, recipe=recipe)
    plain_z = {**cal.to_meta(), "recipe": recipe.replace("+log(bm25)", "")}
    assert "recipe" in (
        suf.Calibration.from_meta(plain_z).stale(model="a", rows=1000, recipe=recipe) or ""
    )
    unrecorded = {k: v for k, v in cal.to_meta().items() if k != "recipe"}
    assert suf.Calibration.from_meta(unrecorded).stale(model="a", rows=1000, recipe=recipe)


def test_probe_questions_are_spans_of_one_sentence() -> None:
    text = (
        "Short one. The boundary layer thickens downstream of the leading edge when the "
        "pressure gradient is adverse and the flow decelerates. Tiny."
    )
    for seed in range(20):
        q = suf.probe_question(text, random.Random(seed))
        assert q is not None and 6 <= len(q.split()) <= 14
        assert q in text and "Short" not in q and "Tiny" not in q
    han = "液氮在标准大气压下的沸点约为零下一百九十六摄氏度。短句。"
    q = suf.probe_question(han, random.Random(1))
    assert q is not None and 8 <= len(q) <= 20 and q in han
    assert suf.probe_question("Too short. Also short.", random.Random(0)) is None


def test_idf_never_negative_and_rarer_weighs_more() -> None:
    assert suf.idf(1000, 1000) >= 0
    assert suf.idf(1, 1000) > suf.idf(100, 1000) > suf.idf(900, 1000)
