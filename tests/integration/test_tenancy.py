"""A document belongs to its tenant in every write path, on a real server of each engine.

Reads were always filtered by tenant; these tests are about writes and bookkeeping: two
tenants with the same document id (``handbook.md``, the path as typed) must be two
documents for ingest, re-ingest, delete, directory sync, ACL updates, status rows and
version fences. Also here: the access-only path from ``ingest``, identity strings in
their one form, the evaluation clean-up and the in-place upgrade of an older index.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from es_rag import jobs
from es_rag.acl import make_acl, make_caller
from es_rag.config import Settings
from es_rag.engine.client import Engine
from es_rag.errors import IndexContractError, InputError
from es_rag.pipeline import Ingestor
from es_rag.query.search import Searcher
from es_rag.types import AccessControl, Caller, Document
from tests.conftest import ROOT, unique_index
from tests.integration.conftest import drop_alias
from tests.integration.test_ingest import CountingEmbedder

pytestmark = pytest.mark.integration

HANDBOOK_A = "# Handbook\n\nAcme refunds are paid back within five working days.\n"
HANDBOOK_B = "# Handbook\n\nGlobex staff receive thirty days of annual leave.\n"


def rows_of(engine: Engine, alias: str, tenant: str, doc_id: str) -> dict[str, dict[str, Any]]:
    engine.refresh(alias)
    query = {
        "query": {
            "bool": {"filter": [{"term": {"tenant_id": tenant}}, {"term": {"doc_id": doc_id}}]}
        }
    }
    return {h["_id"]: h["_source"] for h in engine.scan(alias, query)}


def doc(tenant: str, text: str, *, doc_id: str = "handbook.md", **acl: Any) -> Document:
    if not acl:
        acl = {"public": True}
    return Document(doc_id=doc_id, text=text, acl=make_acl(tenant, **acl))


def test_two_tenants_with_one_doc_id_are_two_documents(
    make_settings: Callable[..., Settings],
    ingestor_for: Callable[[Settings], Ingestor],
    searcher_for: Callable[[Settings], Searcher],
    engine: Engine,
) -> None:
    settings = make_settings()
    ingestor = ingestor_for(settings)
    assert ingestor.ingest(doc("acme", HANDBOOK_A), refresh=True).status == "indexed"
    a_rows = rows_of(engine, settings.index, "acme", "handbook.md")
    assert ingestor.ingest(doc("globex", HANDBOOK_B), refresh=True).status == "indexed"
    # Tenant B's ingest of the same id overwrote nothing and deleted nothing of A's.
    assert rows_of(engine, settings.index, "acme", "handbook.md") == a_rows
    b_rows = rows_of(engine, settings.index, "globex", "handbook.md")
    assert b_rows and not set(b_rows) & set(a_rows)

    # B changes its document: A's rows stay exactly as they were.
    changed = doc("globex", HANDBOOK_B.replace("thirty", "forty"))
    result = ingestor.ingest(changed, refresh=True)
    assert result.status == "indexed" and result.tenant == "globex" and result.deleted > 0
    assert rows_of(engine, settings.index, "acme", "handbook.md") == a_rows

    searcher = searcher_for(settings)
    hits = searcher.search("refunds paid back", caller=make_caller("acme"), k=5).hits
    assert hits and all("Acme" in h.text for h in hits)

    # B deletes its document: A keeps all of its rows.
    assert ingestor.delete_document("handbook.md", tenant="globex") == len(b_rows)
    assert rows_of(engine, settings.index, "globex", "handbook.md") == {}
    assert rows_of(engine, settings.index, "acme", "handbook.md") == a_rows
    # Deleting a document of a tenant that has none touches nobody else's.
    assert ingestor.delete_document("handbook.md", tenant="initech") == 0
    assert rows_of(engine, settings.index, "acme", "handbook.md") == a_rows


def test_acl_updates_and_fences_stay_inside_a_tenant(
    make_settings: Callable[..., Settings],
    ingestor_for: Callable[[Settings], Ingestor],
    engine: Engine,
) -> None:
    settings = make_settings()
    ingestor = ingestor_for(settings)
    ingestor.ingest(doc("acme", HANDBOOK_A, allow=["group:hr"]), refresh=True)
    before = rows_of(engine, settings.index, "acme", "handbook.md")

    # An ACL update naming another tenant never moves (or touches) acme's document.
    with pytest.raises(InputError, match="never moves a document between tenants"):
        ingestor.update_acl("handbook.md", make_acl("globex", public=True), refresh=True)
    assert rows_of(engine, settings.index, "acme", "handbook.md") == before

    # Version fences are per tenant: acme at 7 does not make globex's 3 stale.
    v7 = Document(doc_id="faq", text="# FAQ\n\nSeven.", acl=make_acl("acme", public=True))
    v7.doc_version = "7"
    assert ingestor.ingest(v7, refresh=True).status == "indexed"
    v3 = Document(doc_id="faq", text="# FAQ\n\nThree.", acl=make_acl("globex", public=True))
    v3.doc_version = "3"
    assert ingestor.ingest(v3, refresh=True).status == "indexed"
    v6 = Document(doc_id="faq", text="# FAQ\n\nSix.", acl=make_acl("acme", public=True))
    v6.doc_version = "6"
    late = ingestor.ingest(v6, refresh=True)
    assert late.status == "skipped" and late.reason == "stale-version"  # acme's fence holds
    assert ingestor.status.newest_version("acme", "faq") == 7
    assert ingestor.status.newest_version("globex", "faq") == 3

    # Status rows: one per tenant's document.
    st = ingestor.status
    st.record("acme", "handbook.md", "indexed", attempts=1)
    st.record("globex", "handbook.md", "failed", attempts=1, error="boom")
    assert st.get("acme", "handbook.md")["status"] == "indexed"  # type: ignore[index]
    assert st.get("globex", "handbook.md")["status"] == "failed"  # type: ignore[index]
    st.refresh()
    assert [r["tenant_id"] for r in st.rows(status="failed")] == ["globex"]
    assert st.counts(tenant="acme") == {"indexed": 1}
    engine.delete_index(st.name)


def test_directory_sync_only_deletes_the_tenants_own_documents(
    make_settings: Callable[..., Settings],
    ingestor_for: Callable[[Settings], Ingestor],
    tmp_path: Path,
) -> None:
    settings = make_settings()
    ingestor = ingestor_for(settings)
    folder = tmp_path / "kb"
    folder.mkdir()
    (folder / "keep.md").write_text("# Keep\n\nStays.\n")
    gone = str(folder / "gone.md")
    # Both tenants have a document at a path under the folder that no longer exists.
    for tenant in ("acme", "globex"):
        ingestor.ingest(doc(tenant, f"# Gone\n\n{tenant}'s copy.", doc_id=gone), refresh=True)
    # A file the walk now leaves out by its name counts as gone: the index mirrors the
    # folder's documents.
    (folder / "theme.css").write_text("body { color: papayawhip; }\n")
    theme = str(folder / "theme.css")
    ingestor.ingest(doc("acme", "body { color: papayawhip; }", doc_id=theme), refresh=True)
    plan = jobs.plan_sync(ingestor, str(folder), jobs.AclPayload(tenant="ACME", public=True))
    assert [p.key for p in plan.enqueue] == [str(folder / "keep.md")]
    assert plan.delete == [gone, theme] and plan.excluded == 1
    for d in plan.delete:
        jobs.run_delete(ingestor, d, jobs.tenant_of(ingestor, jobs.AclPayload(tenant="ACME")))
    ingestor.index.refresh()
    assert ingestor.index.doc_ids(tenant="acme") == set()
    assert ingestor.index.doc_ids(tenant="globex") == {gone}


def test_an_acl_or_metadata_change_from_ingest_embeds_nothing(
    make_settings: Callable[..., Settings],
    engine: Engine,
    embedder: Any,
    analyzer: Any,
) -> None:
    settings = make_settings()
    counting = CountingEmbedder(embedder)
    ingestor = Ingestor(settings, client=engine, embedder=counting, analyzer=analyzer)
    searcher = Searcher(settings, client=engine, embedder=embedder, analyzer=analyzer)
    sections = "\n\n".join(
        f"## Section {i}\n\nThe merger plan step {i} is owned by the finance team."
        for i in range(40)
    )
    text = f"# Merger plan\n\n{sections}\n"
    first = Document(
        doc_id="plan",
        text=text,
        acl=make_acl("acme", allow=["group:finance"]),
        metadata={"product": "deals", "owner": "cfo"},
    )
    assert ingestor.ingest(first, refresh=True).status == "indexed"
    calls = counting.calls
    legal = make_caller("acme", groups=["legal"])
    assert searcher.search("merger plan step", caller=legal, k=3).hits == []

    # The same text, a new --allow and one metadata key fewer: the access-only path.
    second = Document(
        doc_id="plan",
        text=text,
        acl=make_acl("acme", allow=["group:finance", "group:legal"]),
        metadata={"product": "deals"},
    )
    result = ingestor.ingest(second, refresh=True)
    assert (result.status, result.reason) == ("indexed", "access-only")
    assert counting.calls == calls  # nothing embedded
    hits = searcher.search("merger plan step", caller=legal, k=3).hits
    assert hits and all(h.metadata == {"product": "deals"} for h in hits)  # "owner" is gone
    rows = rows_of(engine, settings.index, "acme", "plan")
    assert all(r["allowed_principals"] == ["group:finance", "group:legal"] for r in rows.values())
    # kNN still finds the children: their vectors survived the partial update.
    knn = searcher.search("merger plan step", caller=legal, k=3, strategy="knn").hits
    assert knn and knn[0].doc_id == "plan"

    # Nothing changed now: skipped, still no embedding. A content change embeds again.
    assert ingestor.ingest(second, refresh=True).reason == "unchanged"
    third = Document(doc_id="plan", text=text + "\nOne more line.\n", acl=second.acl)
    assert ingestor.ingest(third, refresh=True).reason is None
    assert counting.calls > calls


def test_identity_strings_match_in_any_spelling(
    make_settings: Callable[..., Settings],
    ingestor_for: Callable[[Settings], Ingestor],
    searcher_for: Callable[[Settings], Searcher],
) -> None:
    """A deny entry written in another case or Unicode form still fires, whoever built the
    ACL (here the dataclass, bypassing make_acl) and whoever built the caller."""
    settings = make_settings()
    ingestor = ingestor_for(settings)
    zoe_nfd = unicodedata.normalize("NFD", "user:Zoë")
    acl = AccessControl(
        tenant_id="ACME",
        visibility="restricted",
        allowed_principals=("GROUP:Staff",),
        denied_principals=(zoe_nfd, "User:MALLORY"),
    )
    ingestor.ingest(
        Document(doc_id="memo", text="# Memo\n\nThe staff party is on Friday.", acl=acl),
        refresh=True,
    )
    searcher = searcher_for(settings)

    def sees(caller: Caller) -> bool:
        return bool(searcher.search("staff party friday", caller=caller, k=3).hits)

    assert sees(Caller(tenant="acme", principals=frozenset({"group:staff"})))
    assert not sees(Caller(tenant="Acme", principals=frozenset({"group:STAFF", "user:mallory"})))
    assert not sees(make_caller("acme", users=["Zoë"], groups=["staff"]))  # NFC here, NFD stored
    assert not sees(make_caller("globex", groups=["staff"]))
    case_kept = settings.model_copy(update={"principal_case_sensitive": True})
    with pytest.raises(IndexContractError, match="ES_RAG_PRINCIPAL_CASE_SENSITIVE"):
        searcher_for(case_kept).search("staff", caller=make_caller("acme"), k=1)
    with pytest.raises(IndexContractError, match="identity"):
        ingestor_for(case_kept).init_index()


def es_rag(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "es_rag.cli", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture
def cli_env(es_url: str, engine_name: str, minilm_path: str, engine: Engine) -> Any:
    env = {
        **os.environ,
        "ES_RAG_ES_URL": es_url,
        "ES_RAG_ENGINE": engine_name,
        "ES_RAG_INDEX": unique_index("tenancy"),
        "ES_RAG_EMBEDDING_MODEL": minilm_path,
        "HF_HUB_OFFLINE": "1",
    }
    yield env
    drop_alias(engine, env["ES_RAG_INDEX"])
    engine.delete_index(f"{env['ES_RAG_INDEX']}-status")


def test_cli_delete_needs_the_tenant_when_the_id_is_ambiguous(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    handbook = tmp_path / "handbook.md"
    handbook.write_text(HANDBOOK_A)
    for tenant in ("acme", "globex"):
        proc = es_rag(
            cli_env, "ingest", str(handbook), "--doc-id", "hb", "--tenant", tenant, "--public"
        )
        assert proc.returncode == 0, proc.stderr
    proc = es_rag(cli_env, "delete", "hb")
    assert proc.returncode == 1
    assert "held by 2 tenants (acme, globex)" in proc.stderr and "--tenant" in proc.stderr
    out = json.loads(es_rag(cli_env, "delete", "hb", "--tenant", "Globex").stdout)
    assert out["tenant"] == "globex" and out["deleted"] > 0
    # Now unambiguous: the only holder is found without --tenant.
    out = json.loads(es_rag(cli_env, "delete", "hb").stdout)
    assert out["tenant"] == "acme" and out["deleted"] > 0
    assert json.loads(es_rag(cli_env, "delete", "hb").stdout)["deleted"] == 0


def test_eval_with_index_leaves_no_evaluation_documents(
    cli_env: dict[str, str], tmp_path: Path, engine: Engine
) -> None:
    live = tmp_path / "live.md"
    live.write_text("# Live\n\nThe production document stays in the alias.\n")
    assert es_rag(cli_env, "ingest", str(live), "--tenant", "acme", "--public").returncode == 0
    data = tmp_path / "ds"
    data.mkdir()
    corpus = {"lunch": "Lunch is served at noon.", "vpn": "Use the VPN client from home."}
    (data / "corpus.jsonl").write_text(
        "".join(json.dumps({"id": k, "title": k, "text": v}) + "\n" for k, v in corpus.items())
    )
    (data / "queries.jsonl").write_text(
        json.dumps({"id": "q1", "query": "when is lunch", "relevant": ["lunch"]}) + "\n"
    )
    alias = cli_env["ES_RAG_INDEX"]
    args = ["eval", str(data), "--format", "jsonl", "--strategies", "bm25", "--index", alias]
    proc = es_rag(cli_env, *args, "--output", str(tmp_path / "r.json"))
    assert proc.returncode == 0, proc.stderr
    engine.refresh(alias)
    tenants = {h["_source"]["tenant_id"] for h in engine.scan(alias, {"query": {"match_all": {}}})}
    assert tenants == {"acme"}  # only the live document is left
    said = re.search(rf"removed the run's (\d+) rows from {re.escape(alias)}", proc.stderr)
    assert said and int(said.group(1)) > 0, proc.stderr
    # Told to keep them, they stay (under their own tenant, never a real one).
    proc = es_rag(cli_env, *args, "--keep-index", "--output", str(tmp_path / "r2.json"))
    assert proc.returncode == 0, proc.stderr
    engine.refresh(alias)
    tenants = {h["_source"]["tenant_id"] for h in engine.scan(alias, {"query": {"match_all": {}}})}
    assert tenants == {"acme", "es-rag-eval"}
    assert "removed the run's" not in proc.stderr


def _v1_id(doc_id: str, version: str, chunk_type: str, ordinal: int) -> str:
    """How es-rag before id version 2 made chunk ids (no tenant)."""
    key = f"{doc_id}\x00{version}\x00{chunk_type}\x00{ordinal}"
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]


def test_upgrade_index_rewrites_an_older_index_in_place(
    cli_env: dict[str, str], tmp_path: Path, engine: Engine, engine_name: str
) -> None:
    """An index as es-rag wrote it before tenant-scoped ids: ids without the tenant, mixed
    case identities, two-part hashes, status rows and fences keyed by doc id alone."""
    alias = cli_env["ES_RAG_INDEX"]
    note = tmp_path / "plan.md"
    note.write_text("# Plan\n\nThe merger closes in March; finance owns the data room.\n")
    proc = es_rag(cli_env, "ingest", str(note), "--doc-id", "plan", "--tenant", "acme",
                  "--allow", "group:finance")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    engine.refresh(alias)
    (name,) = engine.alias_indices(alias)
    whole = {"query": {"match_all": {}}, "_source": engine.vectors_source(name)}
    current = {h["_id"]: h["_source"] for h in engine.scan(name, whole)}
    old_ids = {
        cid: _v1_id(s["doc_id"], s["doc_version"], s["chunk_type"], s["ordinal"])
        for cid, s in current.items()
    }
    actions = []
    for cid, src in current.items():
        src = {**src, "chunk_id": old_ids[cid], "tenant_id": "Acme"}
        src["allowed_principals"] = ["group:Finance"]
        src["doc_hash"] = src["doc_hash"][:64]
        if src.get("parent_id"):
            src["parent_id"] = old_ids[src["parent_id"]]
        actions.append({"_op_type": "index", "_index": name, "_id": old_ids[cid], "_source": src})
    actions += [{"_op_type": "delete", "_index": name, "_id": cid} for cid in current]
    assert all(
        ok
        for ok, _ in engine.streaming_bulk(
            actions, chunk_size=100, max_retries=0, initial_backoff=1
        )
    )
    meta = engine.mapping(name)["_meta"]
    engine.put_meta(name, {k: v for k, v in meta.items() if k not in ("id_version", "identity")})
    status = f"{alias}-status"
    engine.delete_index(status)
    row = {"kind": "status", "doc_id": "plan", "status": "indexed", "payload": {"tenant": "Acme"}}
    Ingestor(
        Settings(es_url=cli_env["ES_RAG_ES_URL"], engine=engine_name, index=alias), client=engine
    ).status.ensure()  # type: ignore[arg-type]
    engine.put(status, "plan", row, refresh=True)
    engine.put(
        status,
        "fence:plan",
        {"kind": "fence", "doc_id": "plan", "doc_version": "4"},
        version=4,
        refresh=True,
    )

    # Writers refuse it with the way out; so do readers (a deny in another form would miss).
    proc = es_rag(
        cli_env,
        "ingest",
        str(note),
        "--doc-id",
        "plan",
        "--tenant",
        "acme",
        "--allow",
        "group:finance",
    )
    assert proc.returncode == 1 and "es-rag upgrade-index" in proc.stderr
    proc = es_rag(cli_env, "search", "merger", "--tenant", "acme", "--group", "finance")
    assert proc.returncode == 1 and "upgrade-index" in proc.stderr

    proc = es_rag(cli_env, "upgrade-index")
    assert proc.returncode == 0, proc.stderr
    (report,) = json.loads(proc.stdout)["indexes"]
    assert report["rewritten"] == len(current) and report["done"]
    assert (report["status_rows"], report["fences"]) == (1, 1)
    engine.refresh(name)
    after = {h["_id"]: h["_source"] for h in engine.scan(name, whole)}
    assert set(after) == set(current)  # exactly the ids the current es-rag writes
    assert {s["tenant_id"] for s in after.values()} == {"acme"}
    assert all(s["allowed_principals"] == ["group:finance"] for s in after.values())
    assert all(len(s["doc_hash"]) == 96 for s in after.values())
    assert {s["parent_id"] for s in after.values() if s.get("parent_id")} <= set(after)
    hits = json.loads(
        es_rag(
            cli_env,
            "search",
            "merger data room",
            "--tenant",
            "acme",
            "--group",
            "finance",
            "--json",
        ).stdout
    )["hits"]
    assert hits and hits[0]["doc_id"] == "plan"
    ingestor = Ingestor(
        Settings(
            es_url=cli_env["ES_RAG_ES_URL"],
            engine=engine_name,
            index=alias,
            embedding_model=cli_env["ES_RAG_EMBEDDING_MODEL"],
        ),
        client=engine,
    )  # type: ignore[arg-type]
    assert ingestor.status.get("acme", "plan")["status"] == "indexed"  # type: ignore[index]
    assert ingestor.status.newest_version("acme", "plan") == 4
    # ACL updates work at once on the upgraded rows, and a second run has nothing to do.
    assert ingestor.update_acl("plan", make_acl("acme", allow=["group:legal"]), refresh=True) > 0
    (again,) = json.loads(es_rag(cli_env, "upgrade-index").stdout)["indexes"]
    assert again["done"] and again["rewritten"] == 0


def test_writers_racing_to_create_the_index_both_succeed(
    make_settings: Callable[..., Settings],
    ingestor_for: Callable[[Settings], Ingestor],
    engine: Engine,
) -> None:
    """Two workers starting together on a fresh alias: one creates the index, the other
    finds it (the fault suite lost a document to this race before it was handled)."""
    import threading

    settings = make_settings()
    barrier = threading.Barrier(4)
    results: list[Any] = []

    def create() -> None:
        ingestor = ingestor_for(settings)
        barrier.wait()
        try:
            results.append(ingestor.init_index())
        except Exception as exc:  # reported below
            results.append(exc)

    threads = [threading.Thread(target=create) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(isinstance(r, tuple) for r in results), results
    assert sum(created for _, created in results) == 1
    assert len({name for name, _ in results}) == 1
    assert len(engine.alias_indices(settings.index)) == 1
