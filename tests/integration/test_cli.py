"""The `es-rag` command as users and other tools run it: real processes, real server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image

from es_rag.engine.client import Engine
from tests.conftest import unique_index
from tests.integration.conftest import drop_alias

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cli_env(es_url: str, minilm_path: str, engine: Engine) -> Iterator[dict[str, str]]:
    env = {
        **os.environ,
        "ES_RAG_ES_URL": es_url,
        "ES_RAG_INDEX": unique_index("cli"),
        "ES_RAG_EMBEDDING_MODEL": minilm_path,
        "HF_HUB_OFFLINE": "1",
    }
    yield env
    drop_alias(engine, env["ES_RAG_INDEX"])


def es_rag(
    env: dict[str, str], *args: str, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "es_rag.cli", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("docs")
    (root / "handbook.md").write_text(
        "# Handbook\n\n## Holidays\n\nEmployees receive twenty-eight days of annual leave.\n"
    )
    (root / "notes.txt").write_text("The quarterly review meeting takes place on Thursdays.\n")
    (root / "empty.txt").write_text("   \n")
    (root / "binary.txt").write_bytes(b"\x00\x01\x02garbage\xff")
    (root / "report.pdf").write_bytes(b"%PDF-1.4 not really")
    return root


def test_ingest_reports_each_failure_and_ingests_the_rest(
    cli_env: dict[str, str], folder: Path
) -> None:
    proc = es_rag(
        cli_env,
        "ingest",
        folder.name,
        "--tenant",
        "acme",
        "--allow",
        "group:staff",
        cwd=folder.parent,
    )
    assert proc.returncode == 1, proc.stderr
    failed = [line for line in proc.stderr.splitlines() if line.startswith("FAILED")]
    assert len(failed) == 3, proc.stderr
    joined = "\n".join(failed)
    assert "empty.txt" in joined and "empty" in joined.split("empty.txt", 1)[1]
    assert "binary.txt" in joined and "binary" in joined.split("binary.txt", 1)[1]
    # judged by its bytes: a .pdf that is not a real PDF is a damaged one
    assert "report.pdf" in joined and "damaged PDF" in joined.split("report.pdf", 1)[1]
    assert "2 indexed" in proc.stdout


def test_search_json_contract(cli_env: dict[str, str], folder: Path) -> None:
    proc = es_rag(
        cli_env,
        "search",
        "how many vacation days do I get",
        "--tenant",
        "acme",
        "--group",
        "staff",
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["strategy"] == "client-zscore"
    assert set(out["timings_ms"]) >= {"embed", "search", "fuse"}
    hit = out["hits"][0]
    for key in (
        "chunk_id",
        "doc_id",
        "source_uri",
        "title_path",
        "page_start",
        "page_end",
        "text",
        "score",
        "ranks",
    ):
        assert key in hit, key
    assert set(hit["ranks"]) == {"bm25", "knn"}
    assert hit["doc_id"] == f"{folder.name}/handbook.md"  # the path as given
    assert hit["source_uri"] == (folder / "handbook.md").resolve().as_uri()
    assert hit["title_path"] == ["Handbook", "Holidays"]


def test_search_as_outsider_finds_nothing(cli_env: dict[str, str]) -> None:
    proc = es_rag(
        cli_env, "search", "annual leave", "--tenant", "acme", "--as", "user:eve", "--json"
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["hits"] == []


def test_a_folder_walk_leaves_out_a_sites_styles_and_scripts(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    site = tmp_path / "site"
    (site / "css").mkdir(parents=True)
    (site / "drafts").mkdir()
    (site / "index.html").write_text(
        "<html><body><h1>Parking</h1><p>Visitors park in the north garage.</p></body></html>"
    )
    # Text, and indexed as words before: every page again, and the site's styles.
    (site / "search_index.json").write_text(
        json.dumps({"docs": [{"title": "Parking", "text": "Visitors park in the garage."}]})
    )
    (site / "css" / "theme.css").write_text(".zebrastripe { color: papayawhip; }\n")
    (site / "drafts" / "plan.md").write_text("# Plan\n\nThe papayawhip launch plan.\n")
    # A picture with no words in it: nothing to index, nothing wrong (skipped, not failed).
    Image.new("RGB", (320, 200), "white").save(site / "photo.png")

    def ingest(*args: str) -> dict[str, tuple[str, str | None]]:
        proc = es_rag(cli_env, "ingest", str(site), "--tenant", "site", "--public", *args)
        assert proc.returncode == 0, proc.stderr
        rows = json.loads(proc.stdout)["results"] if "--json" in args else []
        return {str(Path(r["doc_id"]).relative_to(site)): (r["status"], r["reason"]) for r in rows}

    def found(words: str) -> set[str]:  # by their words: kNN always has neighbours
        proc = es_rag(cli_env, "search", words, "--tenant", "site", "--strategy", "bm25", "--json")
        return {Path(h["doc_id"]).name for h in json.loads(proc.stdout)["hits"]}

    assert ingest("--exclude", "drafts/", "--json") == {
        "index.html": ("indexed", None),
        "search_index.json": ("skipped", "excluded"),
        "css/theme.css": ("skipped", "excluded"),
        "drafts": ("skipped", "excluded"),
        "photo.png": ("skipped", "no-text"),
    }
    assert found("papayawhip zebrastripe") == set()
    assert found("visitors park garage") == {"index.html"}
    # --all-files drops the built-in patterns only; the caller's own still hold.
    assert ingest("--all-files", "--exclude", "drafts/", "--json") == {
        "index.html": ("skipped", "unchanged"),
        "search_index.json": ("indexed", None),
        "css/theme.css": ("indexed", None),
        "drafts": ("skipped", "excluded"),
        "photo.png": ("skipped", "no-text"),
    }
    assert found("papayawhip zebrastripe") == {"theme.css"}
    # What is already indexed stays (a folder sync is what mirrors a folder).
    proc = es_rag(
        cli_env, "ingest", str(site), "--tenant", "site", "--public", "--exclude", "drafts/"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "0 indexed (0 chunks), 2 skipped, 3 excluded, 0 failed"


def test_forced_native_rrf_fails_with_reason(cli_env: dict[str, str], engine: Engine) -> None:
    proc = es_rag(cli_env, "search", "leave", "--tenant", "acme", "--strategy", "native-rrf")
    if proc.returncode == 0:
        pytest.skip("this cluster runs native RRF (full distribution with an RRF license)")
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "native-rrf cannot run" in lines[0], proc.stderr


def test_ingest_without_acl_is_rejected(
    cli_env: dict[str, str], folder: Path, tmp_path: Path, engine: Engine
) -> None:
    env = {**cli_env, "ES_RAG_INDEX": unique_index("noacl")}
    proc = es_rag(env, "ingest", str(folder / "notes.txt"), "--tenant", "acme")
    assert proc.returncode != 0
    assert "no ACL" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert engine.alias_indices(env["ES_RAG_INDEX"]) == []


def test_init_is_idempotent(cli_env: dict[str, str]) -> None:
    proc = es_rag(cli_env, "init")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["created"] is False and out["index"].startswith(cli_env["ES_RAG_INDEX"])
    assert out["contract"]["dims"] == 384


def test_info_reports_cluster_and_contract(cli_env: dict[str, str], engine_name: str) -> None:
    """No ES_RAG_ENGINE in the environment: the CLI asks the server which engine it is."""
    assert "ES_RAG_ENGINE" not in cli_env
    assert es_rag(cli_env, "init").returncode == 0
    proc = es_rag(cli_env, "info")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["cluster"]["flavor"] == engine_name
    if engine_name == "elasticsearch":
        assert out["cluster"]["version"].startswith(("8.", "9."))
    else:
        assert out["cluster"]["version"].startswith(("2.", "3."))
        assert "opensearch-knn" in out["cluster"]["plugins"]
        assert out["cluster"]["knn_engines"] == ["lucene"]
        assert "neural-search" in out["cluster"]["hybrid_reason"]
    if not out["cluster"]["native_rrf"]:
        assert out["cluster"]["native_rrf_reason"]
    assert out["contract"]["embedding_version"].startswith("st:")


def test_dead_server_is_one_line_error(cli_env: dict[str, str]) -> None:
    from tests.conftest import free_port

    env = {**cli_env, "ES_RAG_ES_URL": f"http://127.0.0.1:{free_port()}"}
    proc = es_rag(env, "search", "x", "--tenant", "acme", "--strategy", "bm25")
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "unreachable" in lines[0], proc.stderr


def test_context_json_contract(cli_env: dict[str, str]) -> None:
    proc = es_rag(
        cli_env,
        "context",
        "how many days of annual leave",
        "--tenant",
        "acme",
        "--group",
        "staff",
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert {"sufficient", "evidence", "prompt", "reason"} <= set(out)
    assert out["sufficient"] is True
    first = out["evidence"][0]
    assert {"n", "doc_id", "source_uri", "title_path", "pages", "text", "score"} <= set(first)
    assert first["n"] == 1 and "twenty-eight days" in first["text"]
    assert "[1]" in out["prompt"]


def test_search_explain_and_filters(cli_env: dict[str, str]) -> None:
    proc = es_rag(
        cli_env,
        "search",
        "annual leave",
        "--tenant",
        "acme",
        "--group",
        "staff",
        "--explain",
        "--filter",
        "mime_type=text/markdown",
    )
    assert proc.returncode == 0, proc.stderr
    assert "bm25 rank" in proc.stdout and "handbook.md" in proc.stdout
    assert "notes.txt" not in proc.stdout  # filtered out (text/plain)
    bad = es_rag(cli_env, "search", "x", "--tenant", "acme", "--filter", "content=leave")
    assert bad.returncode != 0
    lines = bad.stderr.strip().splitlines()
    assert len(lines) == 1 and "FilterError" in lines[0]


def test_eval_command_contract(cli_env: dict[str, str], tmp_path: Path, engine: Engine) -> None:
    """A tiny es-rag JSONL dataset through `es-rag eval`: JSON, table, chart, clean-up."""
    data = tmp_path / "ds"
    data.mkdir()
    docs = {
        "lunch": "The cafeteria serves hot food from noon until two o'clock.",
        "vpn": "Employees connect to the corporate network through the VPN client.",
        "refund": "Refunds are credited to the original card within five working days.",
        "parking": "The garage under building B has two hundred spaces for cars.",
    }
    (data / "corpus.jsonl").write_text(
        "".join(json.dumps({"id": k, "title": k, "text": v}) + "\n" for k, v in docs.items())
    )
    queries = [
        {"id": "q1", "query": "when is lunch served", "relevant": {"lunch": 2}, "type": "lookup"},
        {"id": "q2", "query": "remote network access", "relevant": ["vpn"], "type": "concept"},
        {"id": "q3", "query": "money back to my card", "relevant": ["refund"], "type": "concept"},
    ]
    (data / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    out = tmp_path / "results.json"
    env = {**cli_env, "ES_RAG_INDEX": unique_index("evalcli")}
    proc = es_rag(
        env,
        "eval",
        str(data),
        "--format",
        "jsonl",
        "--strategies",
        "bm25,knn,hybrid,native-rrf",
        "--k",
        "3",
        "--output",
        str(out),
        "--rank-constant",
        "10,60",
        "--runs",
        str(tmp_path / "runs"),
    )
    assert proc.returncode == 0, proc.stderr
    results = json.loads(out.read_text())
    assert set(results) == {
        "bm25",
        "knn",
        "hybrid[rc=10]",
        "hybrid[rc=60]",
        "native-rrf[rc=10]",
        "native-rrf[rc=60]",
    }
    for name in ("bm25", "knn", "hybrid[rc=60]"):
        r = results[name]
        for key in ("ndcg@3", "recall@3", "recall@100", "mrr@3", "map", "hit@3"):
            assert 0.0 <= r[key] <= 1.0, (name, key)
        assert set(r["latency_ms"]) == {"p50", "p95"}
        assert set(r["by_type"]) == {"lookup", "concept"}
        assert r["queries"] == 3
    assert results["knn"]["ndcg@3"] > 0.9  # MiniLM finds all three paraphrases
    assert 0.0 <= results["knn"]["ndcg@3_exp"] <= 1.0
    # --runs: each strategy's ranking as a TREC run that scores the same as the JSON.
    from es_rag.evaluation import evaluate, parse_trec_run

    run_files = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert run_files == ["bm25.run", "hybrid_rc=10.run", "hybrid_rc=60.run", "knn.run"]
    knn_run = parse_trec_run((tmp_path / "runs" / "knn.run").read_text())
    qrels = {"q1": {"lunch": 2}, "q2": {"vpn": 1}, "q3": {"refund": 1}}
    assert evaluate(knn_run, qrels, k=3)["ndcg@3"] == pytest.approx(results["knn"]["ndcg@3"])
    assert "vs_" in "".join(results["hybrid[rc=60]"])
    if "error" in results["native-rrf[rc=60]"]:
        assert "native-rrf cannot run" in results["native-rrf[rc=60]"]["error"]
    assert "| strategy |" in proc.stdout and "| knn |" in proc.stdout
    assert out.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"
    meta = json.loads(out.with_suffix(".meta.json").read_text())
    assert meta["dataset"]["queries"] == 3 and meta["ingest"]["indexed"] == 4
    assert engine.alias_indices(meta["index"]) == []  # fresh index dropped
