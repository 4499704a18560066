"""Convert small public judged test collections into BEIR layout for development runs.

Usage::

    python scripts/dev_collections.py --raw RAWDIR --out OUTDIR [--only NAME ...]

writes ``OUTDIR/<name>/corpus.jsonl`` (``_id``, ``title``, ``text``), ``queries.jsonl``
(``_id``, ``text``) and ``qrels/test.tsv`` (header ``query-id corpus-id score``). Empty
documents are skipped, judgments whose document is missing are dropped (and counted), and
queries left without judgments are dropped. Every collection here has binary judgments
(score 1). Standard library only; nothing is downloaded.

The collections are for development only: they are not the independent check sets (CISI,
CACM, NPL/Vaswani and DRCD are deliberately absent and must not be added here).

Collections, and where their raw files come from. Each is one public GitHub repository
(owner/name), read at the commit given, with ``git show COMMIT:PATH``; put the files under
``RAWDIR/<dir>/`` with the names shown.

``med`` -- Medline (MEDLARS) collection, 1033 biomedical abstracts, 30 queries; English.
    Classic SMART/Glasgow IR test collection (Cornell SMART project, redistributed by the
    University of Glasgow IR group); no explicit licence, freely redistributed for research.

    - ``med/MED.ALL``: adaxu91/lucene-searching @ ed60ce40f8bd9a0ec864f1c364b68a470d787c6c,
      path ``MED.ALL``. This copy has one edit by its uploader: the words "to be or not to
      be. to be or not to be." appended to the first line of document 1; the converter
      removes them (``_MED_JUNK``).
    - ``med/MED.QRY``: ericlabouve/Term-Proximity-Research @
      b1ff5d6abca93e16837b7cd8aaa25b890be69dbe, path ``datasets/med/MED.QRY``.
    - ``med/MED.REL``: lailaglez/belief-network-irs @
      7a2503c8e8a879ed50f477c1a4397a7942eec91e, path ``med/MED.REL``. That copy has three
      columns (``query doc 1``); the four-column original (``query 0 doc 1``) is read too.

``time`` -- TIME magazine collection, 423 articles (1963), 83 queries; English. SMART/Glasgow
    collection, same provenance as MED. TIME.REL numbers documents by position (1..423),
    not by their ``*TEXT nnn`` header, so the ids are positions; titles are empty.

    - ``time/TIME.ALL``, ``time/TIME.QUE``, ``time/TIME.REL``: Chaplinski/IR-Assignment3 @
      62fe0939662f793e48ac91f7b99d1cf724d7e862, paths ``time/TIME.ALL``, ``time/TIME.QUE``,
      ``time/TIME.REL``.

``adi`` -- ADI collection (American Documentation Institute), 82 short abstracts, 35 queries;
    English. SMART/Glasgow collection, same provenance as MED.

    - ``adi/ADI.ALL``, ``adi/ADI.QRY``, ``adi/ADI.REL``: fabianobie/luppar @
      b1aad7cf7076ef8763b094b236ae65648d10505b, paths ``data/adi/ADI.ALL``,
      ``data/adi/ADI.QRY``, ``data/adi/ADI.REL``.

``lisa`` -- LISA (Library and Information Science Abstracts, 1982), 6003 records (5999
    distinct numbers: 1993-1997 are absent and 1998-2001 appear twice), 35 queries; English.
    Glasgow IR group collection; no explicit licence, research use.
    The judgments are read from LISARJ.NUM, which has all 35 queries; LISA.REL lacks queries
    22 and 23 (its block for 22/23 is labelled "Query 35"), so it is only a fallback.

    - ``lisa/LISA0.001`` ... ``lisa/LISA5.850`` (14 document files), ``lisa/LISA.QUE``,
      ``lisa/LISA.REL``, ``lisa/LISARJ.NUM``: HamzaMouaz/AI-powered-information-retrieval-system
      @ 9b403e8cde7fe9c7d2ec0feaca19a1198d87579d, paths ``Collections/LISA*`` (documents)
      and ``LISA.QUE``, ``LISA.REL``, ``LISARJ.NUM`` at the top level.

``dureader-robust-dev`` -- DuReader-robust dev set (Baidu, 2020 Language and Intelligence
    Challenge), SQuAD-style JSON: 1417 questions over 1417 paragraphs (1398 distinct
    contexts); Simplified Chinese. Licence: Baidu's participant agreement (License.docx
    shipped with the data): non-commercial research or teaching only. Identical contexts are
    merged into one document, and each question's judged document is its own paragraph.
    The raw ``dev.json`` also loads directly with es-rag ``--format squad`` (answer_start is
    -1 throughout, which that reader does not use), but then the 19 duplicate contexts
    become separate documents of which only one is judged.

    - ``dureader_robust/dev.json``: pengwei-iie/Dureader_robustness @
      0b42eb3c6ad9e5093e1a5b364404f46e85d4b57e, path
      ``data_2020/dureader_robust-data/dev.json`` (same blob as ``data_2020/devset/dev.json``).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

Corpus = dict[str, tuple[str, str]]  # doc id -> (title, text)
Queries = dict[str, str]
Qrels = dict[str, dict[str, int]]

_MED_JUNK = " to be or not to be. to be or not to be."
_BLANK_LINE = re.compile(r"\n[ \t]*\n")


@dataclass
class Collection:
    corpus: Corpus
    queries: Queries
    qrels: Qrels
    notes: list[str] = field(default_factory=list)


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace").replace("\r\n", "\n")


def _squash(text: str) -> str:
    return " ".join(text.split())


def _smart_records(raw: str) -> Iterable[tuple[str, dict[str, str]]]:
    """Yield (id, {field letter: text}) from a SMART-format file (.I n / .T / .A / .W ...).

    A field that occurs twice (ADI has records with two .T or two .A) keeps its first value.
    """
    for block in re.split(r"^\.I[ \t]+", raw, flags=re.M)[1:]:
        rec_id, _, rest = block.partition("\n")
        fields: dict[str, str] = {}
        for letter, body in re.findall(
            r"^\.([A-Z])[ \t]*\n(.*?)(?=^\.[A-Z][ \t]*\n|\Z)", rest, flags=re.M | re.S
        ):
            fields.setdefault(letter, body)
        yield rec_id.strip(), fields


def _smart_corpus(raw: str) -> Corpus:
    corpus: Corpus = {}
    for doc_id, fields in _smart_records(raw):
        title = _squash(fields.get("T", ""))
        text = _squash(fields.get("W", ""))
        corpus[doc_id] = (title, text)
    return corpus


def _smart_queries(raw: str) -> Queries:
    return {qid: _squash(f.get("W", "")) for qid, f in _smart_records(raw)}


def _pairs_qrels(raw: str, query_col: int, doc_col: int, min_cols: int) -> Qrels:
    qrels: Qrels = {}
    for line in raw.splitlines():
        parts = line.split()
        if len(parts) >= min_cols:
            qrels.setdefault(parts[query_col], {})[parts[doc_col]] = 1
    return qrels


def load_med(raw: Path) -> Collection:
    text = _read(raw / "MED.ALL")
    notes = []
    if _MED_JUNK in text:
        text = text.replace(_MED_JUNK, "")
        notes.append("removed uploader's test words from MED.ALL document 1")
    rel = _read(raw / "MED.REL")
    four = all(len(line.split()) == 4 for line in rel.splitlines() if line.strip())
    qrels = _pairs_qrels(rel, 0, 2, 4) if four else _pairs_qrels(rel, 0, 1, 3)
    return Collection(_smart_corpus(text), _smart_queries(_read(raw / "MED.QRY")), qrels, notes)


def load_adi(raw: Path) -> Collection:
    corpus = _smart_corpus(_read(raw / "ADI.ALL"))
    corpus = {d: (t, x or t) for d, (t, x) in corpus.items()}  # a title-only record stays
    qrels = _pairs_qrels(_read(raw / "ADI.REL"), 0, 1, 2)
    return Collection(corpus, _smart_queries(_read(raw / "ADI.QRY")), qrels)


def load_time(raw: Path) -> Collection:
    docs = re.split(r"^\*TEXT\b[^\n]*\n", _read(raw / "TIME.ALL"), flags=re.M)[1:]
    corpus: Corpus = {}
    for n, body in enumerate(docs, 1):
        body = re.split(r"^\*STOP\b", body, flags=re.M)[0]
        corpus[str(n)] = ("", _squash(body))
    queries: Queries = {}
    for block in re.split(r"^\*FIND[ \t]+", _read(raw / "TIME.QUE"), flags=re.M)[1:]:
        qid, _, body = block.partition("\n")
        queries[qid.strip()] = _squash(re.split(r"^\*STOP\b", body, flags=re.M)[0])
    qrels: Qrels = {}
    for line in _read(raw / "TIME.REL").splitlines():
        parts = line.split()
        if len(parts) >= 2:
            qrels.setdefault(parts[0], {}).update({d: 1 for d in parts[1:]})
    return Collection(corpus, queries, qrels)


def load_lisa(raw: Path) -> Collection:
    corpus: Corpus = {}
    notes: list[str] = []
    repeated = 0
    files = sorted(p for p in raw.glob("LISA[0-9].[0-9][0-9][0-9]"))
    for path in files:
        for rec in re.split(r"^\*{10,}[ \t]*$", _read(path), flags=re.M):
            m = re.search(r"^Document[ \t]+(\d+)[ \t]*\n(.*)", rec, flags=re.M | re.S)
            if not m:
                continue
            doc_id, body = m.group(1), m.group(2)
            head = _BLANK_LINE.split(body.strip("\n"), maxsplit=1)  # title ends at a blank line
            title, text = head[0], head[1] if len(head) > 1 else ""
            if doc_id in corpus:
                repeated += 1
                continue
            corpus[doc_id] = (_squash(title), _squash(text) or _squash(title))
    if repeated:
        notes.append(f"{repeated} repeated document numbers kept once")
    queries: Queries = {}
    for m in re.finditer(r"^(\d+)[ \t]*\n(.*?)#", _read(raw / "LISA.QUE"), flags=re.M | re.S):
        queries[m.group(1)] = _squash(m.group(2))
    qrels: Qrels = {}
    rj = raw / "LISARJ.NUM"
    if rj.exists():
        toks = _read(rj).split()
        i = 0
        while i + 1 < len(toks):
            qid, n = toks[i], int(toks[i + 1])
            qrels[qid] = {d: 1 for d in toks[i + 2 : i + 2 + n]}
            i += 2 + n
    else:
        notes.append("LISARJ.NUM missing: judgments from LISA.REL (lacks queries 22, 23)")
        rel = _read(raw / "LISA.REL")
        for m in re.finditer(r"Query[ \t]+(\d+)\s+\d+ Relevant Refs:\s+([\d\s]*?)-1", rel):
            qrels.setdefault(m.group(1), {}).update({d: 1 for d in m.group(2).split()})
    return Collection(corpus, queries, qrels, notes)


def load_dureader(raw: Path) -> Collection:
    data = json.loads((raw / "dev.json").read_text(encoding="utf-8"))
    corpus: Corpus = {}
    by_context: dict[str, str] = {}
    queries: Queries = {}
    qrels: Qrels = {}
    for article in data["data"]:
        for para in article["paragraphs"]:
            context = para["context"].strip()
            doc_id = by_context.get(context)
            if doc_id is None:
                doc_id = by_context[context] = f"d{len(by_context) + 1}"
                corpus[doc_id] = (article.get("title") or "", context)
            for qa in para["qas"]:
                queries[str(qa["id"])] = qa["question"].strip()
                qrels[str(qa["id"])] = {doc_id: 1}
    return Collection(corpus, queries, qrels)


LOADERS: dict[str, tuple[str, Callable[[Path], Collection]]] = {
    "med": ("med", load_med),
    "time": ("time", load_time),
    "adi": ("adi", load_adi),
    "lisa": ("lisa", load_lisa),
    "dureader-robust-dev": ("dureader_robust", load_dureader),
}


def clean(col: Collection) -> dict[str, int]:
    """Drop empty documents, judgments on absent documents and unjudged queries, in place."""
    empty = [d for d, (title, text) in col.corpus.items() if not (title or text).strip()]
    for d in empty:
        del col.corpus[d]
    dangling = 0
    for qid in list(col.qrels):
        judged = {d: s for d, s in col.qrels[qid].items() if d in col.corpus and s > 0}
        dangling += len(col.qrels[qid]) - len(judged)
        if judged and qid in col.queries and col.queries[qid]:
            col.qrels[qid] = judged
        else:
            del col.qrels[qid]
    unjudged = [q for q in col.queries if q not in col.qrels]
    for q in unjudged:
        del col.queries[q]
    return {"empty_docs": len(empty), "dangling_qrels": dangling, "unjudged_queries": len(unjudged)}


def write(col: Collection, out: Path) -> None:
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    with (out / "corpus.jsonl").open("w", encoding="utf-8") as fh:
        for doc_id, (title, text) in col.corpus.items():
            row = {"_id": doc_id, "title": title, "text": text}
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    with (out / "queries.jsonl").open("w", encoding="utf-8") as fh:
        for qid, text in col.queries.items():
            fh.write(json.dumps({"_id": qid, "text": text}, ensure_ascii=False) + "\n")
    with (out / "qrels" / "test.tsv").open("w", encoding="utf-8") as fh:
        fh.write("query-id\tcorpus-id\tscore\n")
        for qid in col.queries:
            for doc_id, score in col.qrels[qid].items():
                fh.write(f"{qid}\t{doc_id}\t{score}\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--raw", type=Path, required=True, help="folder holding the raw files")
    ap.add_argument("--out", type=Path, required=True, help="folder for the BEIR output")
    ap.add_argument("--only", nargs="+", choices=sorted(LOADERS), help="collections to convert")
    args = ap.parse_args(argv)
    failed = False
    for name in args.only or list(LOADERS):
        subdir, loader = LOADERS[name]
        try:
            col = loader(args.raw / subdir)
        except (OSError, ValueError, KeyError) as exc:
            print(f"{name}: skipped ({type(exc).__name__}: {exc})", file=sys.stderr)
            failed = True
            continue
        dropped = clean(col)
        write(col, args.out / name)
        n_qrels = sum(len(v) for v in col.qrels.values())
        mean = n_qrels / len(col.queries) if col.queries else 0.0
        extra = "; ".join(col.notes + [f"{k}={v}" for k, v in dropped.items() if v])
        print(
            f"{name}: {len(col.corpus)} docs, {len(col.queries)} queries, {n_qrels} qrels, "
            f"{mean:.2f} relevant/query" + (f" ({extra})" if extra else "")
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
