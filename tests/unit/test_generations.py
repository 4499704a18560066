"""Index generations without a server: ordering, recipes, and rows remade for another one."""

from __future__ import annotations

from es_rag.analysis import TextAnalyzer
from es_rag.config import Settings
from es_rag.engine.mapping import IndexContract, build_index_body, recorded_settings
from es_rag.generations import (
    Generation,
    Generations,
    Layout,
    by_generation,
    generation_number,
    mirror_alias,
    same_recipe,
)
from es_rag.rows import Retarget, row_embedding_text


def test_generations_sort_by_number_not_as_text() -> None:
    names = ["kb-10", "kb-9", "kb-2", "kb-status", "kb-1"]
    assert by_generation("kb", names) == ["kb-status", "kb-1", "kb-2", "kb-9", "kb-10"]
    assert generation_number("kb", "kb-10") == 10
    assert generation_number("kb", "kb-eval-3") is None
    assert generation_number("kb", "kbx-3") is None
    assert mirror_alias("kb") == "kb-mirror"


def test_the_index_body_records_the_recipe_and_recipes_compare_what_computes() -> None:
    settings = Settings(embedding_model="m", analyzer_language="english")
    contract = IndexContract("m", "st:m:384:norm", 384, "cosine", "a1", "c1", "p1")
    body = build_index_body(settings, contract)
    recorded = body["mappings"]["_meta"]["settings"]
    assert recorded == recorded_settings(settings)
    assert IndexContract.from_meta(body["mappings"]["_meta"]) == contract
    # Where a model runs and how vectors are stored are not what it computes.
    moved = recorded_settings(
        settings.model_copy(update={"embedding_url": "http://x", "vector_index_type": "hnsw"})
    )
    assert same_recipe(recorded, moved)
    other = recorded_settings(settings.model_copy(update={"embedding_model": "e5"}))
    assert not same_recipe(recorded, other)


def _gen(index: str, configured: bool) -> Generation:
    return Generation(index, None, Settings(), configured, {})


def test_a_layout_writes_the_served_generation_first() -> None:
    served, mirrored = _gen("kb-2", False), _gen("kb-1", True)
    layout = Layout(primary=served, mirror=mirrored)
    assert [g.index for g in layout.targets()] == ["kb-2", "kb-1"]
    assert layout.own() is mirrored
    assert Layout(primary=None).targets() == []


def test_retarget_remakes_vectors_and_terms_and_keeps_the_rest() -> None:
    child = {
        "chunk_type": "child",
        "doc_id": "d",
        "doc_hash": "h" * 96,
        "context_header": "Guide > Refunds",
        "content": "Refunds are issued within five days.",
        "title_path": ["Guide", "Refunds"],
        "allowed_principals": ["user:a"],
        "analyzer_version": "old-analyzer",
        "content_terms": "stale",
        "embedding_model": "minilm",
        "embedding_version": "st:minilm",
    }
    parent = {**child, "chunk_type": "parent", "content_terms": None}
    parent.pop("content_terms")
    analyzer = TextAnalyzer("english")
    retarget = Retarget("kb-2", analyzer, "e5", "openai:e5:384", context_header_prefix=True)
    assert retarget.texts([child, parent]) == [
        "Guide > Refunds\nRefunds are issued within five days."
    ]
    assert row_embedding_text(child, prefix=False) == child["content"]
    out = list(retarget.actions([("c1", child), ("p1", parent)], [[0.5, 0.5]]))
    assert [(a["_index"], a["_id"]) for a in out] == [("kb-2", "c1"), ("kb-2", "p1")]
    new_child, new_parent = out[0]["_source"], out[1]["_source"]
    assert new_child["embedding"] == [0.5, 0.5]
    assert new_child["content_terms"] == analyzer.analyze(retarget.texts([child])[0])
    assert new_child["title_terms"] == analyzer.analyze("Guide Refunds")
    assert new_child["embedding_version"] == new_parent["embedding_version"] == "openai:e5:384"
    assert new_child["analyzer_version"] == analyzer.version
    assert "embedding" not in new_parent and "content_terms" not in new_parent
    for key in ("doc_hash", "allowed_principals", "content", "title_path"):
        assert new_child[key] == child[key]
    assert child["content_terms"] == "stale"  # the input is not changed


def test_retarget_keeps_terms_made_by_the_same_analyzer() -> None:
    analyzer = TextAnalyzer("english")
    child = {
        "chunk_type": "child",
        "content": "x",
        "analyzer_version": analyzer.version,
        "content_terms": "kept",
    }
    retarget = Retarget("kb-2", analyzer, "e5", "v", context_header_prefix=True)
    (action,) = retarget.actions([("c", child)], [[1.0]])
    assert action["_source"]["content_terms"] == "kept"


def test_each_generation_is_analysed_as_its_contract_records() -> None:
    """A writer that adopted the pre-folding analysis for the served generation still
    writes a mirrored generation made with folding in the new analysis, and back."""
    folded, plain = TextAnalyzer(), TextAnalyzer(han_fold=False)

    def gen(version: str | None, configured: bool = True, language: str = "english") -> Generation:
        contract = None
        if version is not None:
            contract = IndexContract("m", "st:m:384:norm", 384, "cosine", version, "c1", "p1")
        return Generation("kb-1", contract, Settings(analyzer_language=language), configured, {})

    generations = Generations(engine=None, settings=Settings())  # type: ignore[arg-type]
    assert generations.analyzer(gen(plain.version), plain) is plain
    mirror = generations.analyzer(gen(folded.version), plain)
    assert mirror.version == folded.version and mirror.han_fold
    assert generations.analyzer(gen(plain.version), folded).version == plain.version
    assert generations.analyzer(gen(None), folded) is folded
    german = TextAnalyzer("german", han_fold=False).version
    older_german = gen(german, configured=False, language="german")
    assert generations.analyzer(older_german, folded).version == german
