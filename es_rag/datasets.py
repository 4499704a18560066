"""Evaluation datasets in four formats, loaded into one shape (pure file reading).

- ``beir``: ``corpus.jsonl`` (``_id``, ``title``, ``text``), ``queries.jsonl`` (``_id``,
  ``text``, optional ``metadata.type``), ``qrels/test.tsv`` (header, then query-id,
  corpus-id, score; graded).
- ``squad``: SQuAD-style JSON (one file, or the only ``*.json`` in a folder, or ``--split``);
  each paragraph is a document and each question's relevant document is its paragraph.
- ``cranfield``: ``cran.all.1400``, ``cran.qry``, ``cranqrel``. The n-th query in the file is
  query n of the judgments; Cleverdon's codes 1 (complete answer) … 4 (minimum interest)
  become grades 4 … 1, so higher is better as every metric expects.
- ``jsonl``: es-rag's own: ``corpus.jsonl`` (``id``, ``title``, ``text``) and
  ``queries.jsonl`` (``id``, ``query``, ``relevant`` as ``{doc_id: grade}`` or a list of ids,
  optional ``type``).
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from es_rag.errors import InputError

FORMATS = ("beir", "squad", "cranfield", "jsonl")


@dataclass
class Dataset:
    name: str
    corpus: dict[str, tuple[str, str]]  # doc id → (title, text)
    queries: dict[str, str]
    qrels: dict[str, dict[str, float]]
    types: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Only queries with judgments can be scored; keep the rest out of every figure.
        self.queries = {q: t for q, t in self.queries.items() if self.qrels.get(q)}


def load(path: Path, fmt: str, *, split: str = "test") -> Dataset:
    if fmt not in FORMATS:
        raise InputError(f"unknown dataset format {fmt!r}; expected one of {FORMATS}")
    if not path.exists():
        raise InputError(f"{path}: no such file or directory")
    loader = {"beir": _beir, "squad": _squad, "cranfield": _cranfield, "jsonl": _jsonl}[fmt]
    try:
        return loader(path, split)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError(
            f"{path}: not a valid {fmt} dataset ({type(exc).__name__}: {exc})"
        ) from exc


def _jsonl_rows(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                yield json.loads(line)


def _beir(path: Path, split: str) -> Dataset:
    corpus = {
        str(r["_id"]): (r.get("title") or "", r.get("text") or "")
        for r in _jsonl_rows(path / "corpus.jsonl")
    }
    queries, types = {}, {}
    for r in _jsonl_rows(path / "queries.jsonl"):
        queries[str(r["_id"])] = r["text"]
        qtype = (r.get("metadata") or {}).get("type") or r.get("type")
        if qtype:
            types[str(r["_id"])] = str(qtype)
    qrels: dict[str, dict[str, float]] = {}
    with (path / "qrels" / f"{split}.tsv").open(encoding="utf-8") as fh:
        for row in csv.reader(fh, delimiter="\t"):
            if len(row) < 3 or not row[2].strip().lstrip("-").isdigit():
                continue  # header or blank
            qrels.setdefault(row[0], {})[row[1]] = float(row[2])
    return Dataset(path.name, corpus, queries, qrels, types)


def _squad(path: Path, split: str) -> Dataset:
    if path.is_dir():
        files = sorted(path.glob("*.json"))
        chosen = [f for f in files if split in f.name] or files
        if len(chosen) != 1:
            raise ValueError(f"expected one SQuAD JSON file, found {[f.name for f in chosen]}")
        path = chosen[0]
    data = json.loads(path.read_text(encoding="utf-8"))
    articles = data["data"] if isinstance(data, dict) else data
    corpus, queries, qrels = {}, {}, {}
    for a, article in enumerate(articles):
        for p, paragraph in enumerate(article["paragraphs"]):
            doc_id = str(paragraph.get("id") or f"{a}-{p}")
            corpus[doc_id] = (article.get("title") or "", paragraph["context"])
            for qa in paragraph["qas"]:
                queries[str(qa["id"])] = qa["question"]
                qrels[str(qa["id"])] = {doc_id: 1.0}
    return Dataset(path.stem, corpus, queries, qrels)


def _cranfield(path: Path, split: str) -> Dataset:
    raw = (path / "cran.all.1400").read_text(encoding="utf-8", errors="replace")
    corpus = {}
    for block in re.split(r"^\.I ", raw, flags=re.M)[1:]:
        doc_id, _, rest = block.partition("\n")
        fields = dict(re.findall(r"^\.([TABW])\n(.*?)(?=^\.[TABW]\n|\Z)", rest, flags=re.M | re.S))
        title = " ".join(fields.get("T", "").split())
        text = fields.get("W", "").strip()
        if title or text:  # records 471 and 995 are empty
            corpus[doc_id.strip()] = (title, text or title)
    qraw = (path / "cran.qry").read_text(encoding="utf-8", errors="replace")
    blocks = re.split(r"^\.I ", qraw, flags=re.M)[1:]
    queries = {str(n): " ".join(b.partition(".W")[2].split()) for n, b in enumerate(blocks, 1)}
    qrels: dict[str, dict[str, float]] = {}
    for line in (path / "cranqrel").read_text().splitlines():
        parts = line.split()
        if len(parts) == 3 and 1 <= int(parts[2]) <= 4:
            qrels.setdefault(parts[0], {})[parts[1]] = 5.0 - int(parts[2])
    return Dataset(path.name, corpus, queries, qrels)


def _jsonl(path: Path, split: str) -> Dataset:
    corpus = {
        str(r["id"]): (r.get("title") or "", r.get("text") or "")
        for r in _jsonl_rows(path / "corpus.jsonl")
    }
    queries, qrels, types = {}, {}, {}
    for r in _jsonl_rows(path / "queries.jsonl"):
        qid = str(r["id"])
        queries[qid] = r["query"]
        rel = r["relevant"]
        qrels[qid] = (
            {str(d): float(g) for d, g in rel.items()}
            if isinstance(rel, dict)
            else {str(d): 1.0 for d in rel}
        )
        if r.get("type"):
            types[qid] = str(r["type"])
    return Dataset(path.name, corpus, queries, qrels, types)
