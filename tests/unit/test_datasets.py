"""Dataset loaders and strategy parsing for `es-rag eval` (pure, files made in the test)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from es_rag.datasets import load
from es_rag.errors import ConfigurationError, InputError
from es_rag.eval_runner import parse_strategies, parse_weights

pytestmark = pytest.mark.unit

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"


def test_beir(tmp_path: Path) -> None:
    (tmp_path / "qrels").mkdir()
    (tmp_path / "corpus.jsonl").write_text(
        '{"_id": "d1", "title": "T1", "text": "one"}\n{"_id": "d2", "title": "", "text": "two"}\n'
    )
    (tmp_path / "queries.jsonl").write_text(
        '{"_id": "q1", "text": "first", "metadata": {"type": "factoid"}}\n'
        '{"_id": "q2", "text": "unjudged"}\n'
    )
    (tmp_path / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\nq1\td1\t2\nq1\td2\t0\n"
    )
    d = load(tmp_path, "beir")
    assert d.corpus == {"d1": ("T1", "one"), "d2": ("", "two")}
    assert d.queries == {"q1": "first"}  # q2 has no judgments
    assert d.qrels == {"q1": {"d1": 2.0, "d2": 0.0}}
    assert d.types == {"q1": "factoid"}


def test_squad(tmp_path: Path) -> None:
    data = {
        "data": [
            {
                "title": "A",
                "paragraphs": [
                    {
                        "id": "P0",
                        "context": "ctx zero",
                        "qas": [{"id": "Q0", "question": "q zero?"}],
                    },
                    {"context": "ctx one", "qas": [{"id": "Q1", "question": "q one?"}]},
                ],
            }
        ]
    }
    f = tmp_path / "set.json"
    f.write_text(json.dumps(data))
    d = load(f, "squad")
    assert d.corpus == {"P0": ("A", "ctx zero"), "0-1": ("A", "ctx one")}
    assert d.qrels == {"Q0": {"P0": 1.0}, "Q1": {"0-1": 1.0}}


def test_jsonl(tmp_path: Path) -> None:
    (tmp_path / "corpus.jsonl").write_text('{"id": 1, "text": "x"}\n{"id": 2, "text": "y"}\n')
    (tmp_path / "queries.jsonl").write_text(
        '{"id": "a", "query": "x?", "relevant": {"1": 2}, "type": "lookup"}\n'
        '{"id": "b", "query": "y?", "relevant": [2]}\n'
    )
    d = load(tmp_path, "jsonl")
    assert d.qrels == {"a": {"1": 2.0}, "b": {"2": 1.0}}
    assert d.types == {"a": "lookup"}


@pytest.mark.skipif(not (SHARED / "cranfield").is_dir(), reason="shared dev data not present")
def test_cranfield_real_files() -> None:
    d = load(SHARED / "cranfield", "cranfield")
    assert len(d.corpus) == 1398 and len(d.queries) == 225
    assert d.qrels["1"]["184"] == 3.0  # code 2 → grade 3


def test_bad_inputs(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="unknown dataset format"):
        load(tmp_path, "csv")
    with pytest.raises(InputError, match="not a valid beir"):
        load(tmp_path, "beir")
    with pytest.raises(InputError, match="no such file"):
        load(tmp_path / "missing", "jsonl")


def test_strategies_and_sweeps() -> None:
    plain = parse_strategies("bm25,knn,hybrid+rerank")
    assert [(v.name, v.base, v.rerank) for v in plain] == [
        ("bm25", "bm25", False),
        ("knn", "knn", False),
        ("hybrid+rerank", "hybrid", True),
    ]
    swept = parse_strategies(
        "bm25,client-rrf", rank_constants=[10, 60], weights=parse_weights("1:1,2:1")
    )
    names = [v.name for v in swept]
    assert names[0] == "bm25" and len(names) == 5  # bm25 is not swept
    assert "client-rrf[rc=10,w=2:1]" in names
    v = next(v for v in swept if v.name == "client-rrf[rc=60,w=2:1]")
    assert v.overrides == {"rank_constant": 60, "bm25_weight": 2.0, "knn_weight": 1.0}
    fb = parse_strategies("bm25,client-zscore", feedbacks=[0, 3])
    assert [v.name for v in fb] == ["bm25", "client-zscore[fb=0]", "client-zscore[fb=3]"]
    assert fb[2].overrides == {"feedback_chunks": 3}
    st = parse_strategies("client-zscore", feedbacks=[3], sentences=[0, 4])
    assert [v.name for v in st] == ["client-zscore[fb=3,sent=0]", "client-zscore[fb=3,sent=4]"]
    assert st[1].overrides == {"feedback_chunks": 3, "question_sentences": 4}
    with pytest.raises(ConfigurationError):
        parse_strategies("magic")
    with pytest.raises(ConfigurationError):
        parse_weights("2")
