"""The leak suite: generated tenants, principals, ACLs and documents; no caller ever reads a
chunk DESIGN.md §5 keeps from it, on a real server of each engine.

Hypothesis generates, example after example, into one shared index per engine (so earlier
examples' documents of every tenant are always there to be leaked):

- tenants and principals with case and Unicode variants (``ACME``/``acme``, ``Zoë`` in NFC
  and NFD, ``USER:``/``user:``), ACLs (public, allow, deny, both), documents whose ids
  collide across tenants (``handbook.md``), re-ingests with a new ACL over the same text
  (the access-only path), metadata;
- callers in any spelling, questions over the shared vocabulary, so that other tenants'
  and other principals' chunks always compete for the top ranks.

Every search runs with every strategy that runs here (bm25, knn, client-rrf,
client-linear, client-zscore), with and without a metadata filter, highlights on; plus
``context`` with parent and neighbour expansion, and with rerank. Each returned chunk,
highlight, expanded evidence text and prompt is traced to its document through a marker
word that every paragraph of a document carries, and checked against the ACL the test
asked for, under an oracle written here (NFC, case folding) independently of es_rag.acl.

CI runs a bounded number of examples (``ES_RAG_LEAK_EXAMPLES``, default 100 per engine);
``pytest --long`` (1,000 examples, or ``ES_RAG_LEAK_EXAMPLES=N``) makes it a soak. The
searches run and leaks found go to ``results/leak-suite-<engine>.json`` and the output.
"""

from __future__ import annotations

import json
import os
import re
import unicodedata
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from es_rag.config import Settings
from es_rag.engine.client import Engine
from es_rag.pipeline import Ingestor
from es_rag.query.context import ContextBuilder
from es_rag.query.search import Searcher
from es_rag.types import AccessControl, Caller, Document
from tests.conftest import ROOT, unique_index
from tests.integration.conftest import drop_alias

pytestmark = pytest.mark.integration

TENANTS = ["acme", "globex", "zoë-corp"]
PEOPLE = ["alice", "bob", "zoë", "mallory", "ünal"]
GROUPS = ["staff", "finance", "ops"]
VOCAB = ["refund", "merger", "salary", "vpn", "holiday", "invoice", "audit", "badge"]
DOC_IDS = ["handbook.md", "a.md", "b.md"]
PRODUCTS = ["pay", "hr"]
STRATEGIES = ["bm25", "knn", "client-rrf", "client-linear", "client-zscore"]
MARKER = re.compile(r"\bmk([0-9a-f]{10})\b")


# --- the oracle: written here, not imported ---------------------------------------------------
def same(text: str) -> str:
    """One identity per name: NFC after case folding (the documented default policy)."""
    return unicodedata.normalize("NFC", unicodedata.normalize("NFC", text.strip()).casefold())


def principal(text: str) -> str:
    kind, _, name = text.partition(":")
    return f"{kind.lower()}:{same(name)}"


@dataclass(frozen=True)
class Intended:
    tenant: str
    public: bool
    allowed: frozenset[str]
    denied: frozenset[str]

    def visible_to(self, tenant: str, principals: frozenset[str]) -> bool:
        return (
            self.tenant == tenant
            and (self.public or bool(self.allowed & principals))
            and not (self.denied & principals)
        )


@dataclass
class Ledger:
    """What the test asked for: marker → intended ACL; the current marker of each document."""

    markers: dict[str, Intended] = field(default_factory=dict)
    current: dict[tuple[str, str], str] = field(default_factory=dict)
    examples: int = 0
    ingests: int = 0
    searches: int = 0
    contexts: int = 0
    checked: int = 0
    leaks: list[dict[str, Any]] = field(default_factory=list)
    stale: list[dict[str, Any]] = field(default_factory=list)


# --- generated spellings ------------------------------------------------------------------------
def spelled(name: str) -> st.SearchStrategy[str]:
    """The same name as users type it: any case, NFC or NFD, padded."""
    forms = st.sampled_from(["NFC", "NFD"])
    cases = st.sampled_from(["keep", "upper", "title"])

    def build(form: str, case: str, pad: bool) -> str:
        text = {"keep": name, "upper": name.upper(), "title": name.title()}[case]
        text = unicodedata.normalize(form, text)
        return f" {text} " if pad else text

    return st.builds(build, forms, cases, st.booleans())


def a_principal(kind: str, names: list[str]) -> st.SearchStrategy[str]:
    kinds = st.sampled_from([kind, kind.upper(), kind.title()])
    return st.builds(
        lambda k, n: f"{k}:{n.strip()}", kinds, st.sampled_from(names).flatmap(spelled)
    )


PRINCIPALS = st.one_of(a_principal("user", PEOPLE), a_principal("group", GROUPS))


@st.composite
def acls(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["public", "allow", "deny", "both"]))
    allow = draw(st.lists(PRINCIPALS, min_size=1, max_size=3)) if kind != "public" else []
    deny = draw(st.lists(PRINCIPALS, min_size=1, max_size=2)) if kind in ("deny", "both") else []
    public = kind in ("public", "deny")
    if kind == "deny":
        allow = []
    return {"tenant": draw(st.sampled_from(TENANTS).flatmap(spelled)), "public": public,
            "allow": allow, "deny": deny}  # fmt: skip


@st.composite
def documents(draw: st.DrawFn) -> dict[str, Any]:
    sections = draw(st.integers(min_value=1, max_value=4))
    words = [
        draw(st.lists(st.sampled_from(VOCAB), min_size=3, max_size=6)) for _ in range(sections)
    ]
    return {
        "doc_id": draw(st.sampled_from(DOC_IDS)),
        "acl": draw(acls()),
        "words": words,
        "product": draw(st.sampled_from(PRODUCTS)),
        "reuse_text": draw(st.booleans()),  # same text as before: the access-only path
    }


@st.composite
def callers(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "tenant": draw(st.sampled_from([*TENANTS, "initech"]).flatmap(spelled)),
        "principals": draw(st.lists(PRINCIPALS, max_size=4)),
    }


def respelled(value: str) -> st.SearchStrategy[str]:
    """A principal someone else wrote, spelled anew (kind and name)."""
    kind, _, name = value.strip().partition(":")
    kinds = st.sampled_from([kind.lower(), kind.upper(), kind.title()])
    return st.builds(lambda k, n: f"{k}:{n.strip()}", kinds, spelled(name.strip()))


@st.composite
def mirrored(draw: st.DrawFn, docs: list[dict[str, Any]]) -> dict[str, Any]:
    """A caller who is named in one of the documents' ACLs (allowed or denied), in another
    spelling: where a forgotten normalisation or deny would show."""
    acl = draw(st.sampled_from(docs))["acl"]
    named = acl["allow"] + acl["deny"] or ["user:alice"]
    chosen = draw(st.lists(st.sampled_from(named), min_size=1, max_size=3))
    return {
        "tenant": draw(spelled(acl["tenant"].strip())),
        "principals": [draw(respelled(p)) for p in chosen] + draw(st.lists(PRINCIPALS, max_size=1)),
    }


@st.composite
def rounds(draw: st.DrawFn) -> dict[str, Any]:
    docs = draw(st.lists(documents(), min_size=1, max_size=5))
    question = st.tuples(
        st.one_of(callers(), mirrored(docs)),
        st.lists(st.sampled_from(VOCAB), min_size=1, max_size=3).map(" ".join),
        st.sampled_from([None, *PRODUCTS]),
    )
    return {
        "docs": docs,
        "questions": draw(st.lists(question, min_size=1, max_size=3)),
        "expand": draw(st.sampled_from(["parent", "neighbours"])),
        "rerank": draw(st.booleans()),
    }


# --- the shared index and its parts ---------------------------------------------------------------
@dataclass
class Suite:
    engine_name: str
    ingestor: Ingestor
    searcher: Searcher
    context: ContextBuilder
    ledger: Ledger
    texts: dict[tuple[str, str], str] = field(default_factory=dict)


def examples(request: pytest.FixtureRequest) -> int:
    if os.environ.get("ES_RAG_LEAK_EXAMPLES"):
        return int(os.environ["ES_RAG_LEAK_EXAMPLES"])
    return 1000 if request.config.getoption("--long") else 100


@pytest.fixture(scope="module")
def suite(
    es_url: str,
    engine: Engine,
    engine_name: str,
    embedder: Any,
    analyzer: Any,
    tiny_reranker_path: str,
    minilm_path: str,
) -> Iterator[Suite]:
    s = Settings(
        es_url=es_url,
        engine=engine_name,  # type: ignore[arg-type]
        index=unique_index("leaks"),
        embedding_model=minilm_path,
        chunk_size=40,
        chunk_overlap=8,
        parent_chunk_size=120,
        rerank_model=tiny_reranker_path,
        rerank_backend="cross-encoder",
        rerank_timeout=60,
        rank_window_size=50,
    )
    ingestor = Ingestor(s, client=engine, embedder=embedder, analyzer=analyzer)
    searcher = Searcher(s, client=engine, embedder=embedder, analyzer=analyzer)
    made = Suite(engine_name, ingestor, searcher, ContextBuilder(searcher), Ledger())
    yield made
    drop_alias(engine, s.index)
    report = {
        "engine": engine_name,
        "examples": made.ledger.examples,
        "ingests": made.ledger.ingests,
        "searches": made.ledger.searches,
        "contexts": made.ledger.contexts,
        "chunks_checked": made.ledger.checked,
        "document_identities": len(made.ledger.current),
        "leaks": len(made.ledger.leaks),
        "stale_rows": len(made.ledger.stale),
    }
    out = ROOT / "results"
    out.mkdir(exist_ok=True)
    (out / f"leak-suite-{engine_name}.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"\n[leaks] {json.dumps(report)}")


def ingest_round(suite: Suite, docs: list[dict[str, Any]]) -> None:
    batch = []
    for spec in docs:
        acl_spec = spec["acl"]
        key = (same(acl_spec["tenant"]), spec["doc_id"])
        if spec["reuse_text"] and key in suite.texts:
            text = suite.texts[key]
        else:
            marker = f"mk{uuid.uuid4().hex[:10]}"
            sections = [
                f"## Part {i} {marker}\n\n{' '.join(words)} {marker}."
                for i, words in enumerate(spec["words"])
            ]
            text = f"# Notes {marker}\n\n" + "\n\n".join(sections) + "\n"
        # Built as users of the Python API build it: the dataclass, in whatever spelling.
        acl = AccessControl(
            tenant_id=acl_spec["tenant"],
            visibility="public" if acl_spec["public"] else "restricted",
            allowed_principals=tuple(acl_spec["allow"]),
            denied_principals=tuple(acl_spec["deny"]),
        )
        batch.append((key, text, acl_spec, Document(
            doc_id=spec["doc_id"], text=text, acl=acl, metadata={"product": spec["product"]}
        )))  # fmt: skip
    results = suite.ingestor.ingest_many([d for *_, d in batch], refresh=True)
    suite.ledger.ingests += len(results)
    for (key, text, acl_spec, _), result in zip(batch, results, strict=True):
        assert result.status in ("indexed", "skipped"), result
        (marker,) = set(MARKER.findall(text))
        suite.texts[key] = text
        suite.ledger.current[key] = marker
        suite.ledger.markers[marker] = Intended(
            tenant=key[0],
            public=acl_spec["public"],
            allowed=frozenset(principal(p) for p in acl_spec["allow"]),
            denied=frozenset(principal(p) for p in acl_spec["deny"]),
        )


def check_text(suite: Suite, text: str, caller: dict[str, Any], where: str) -> None:
    ledger = suite.ledger
    tenant = same(caller["tenant"])
    principals = frozenset(principal(p) for p in caller["principals"])
    for marker in set(MARKER.findall(text)):
        ledger.checked += 1
        intended = ledger.markers[marker]
        if marker not in ledger.current.values():
            ledger.stale.append({"where": where, "marker": marker})
        if not intended.visible_to(tenant, principals):
            ledger.leaks.append(
                {"where": where, "marker": marker, "caller": caller, "row": str(intended)}
            )


def make_caller(spec: dict[str, Any]) -> Caller:
    # As an API user builds it: the dataclass, principals in whatever spelling.
    return Caller(
        tenant=spec["tenant"], principals=frozenset(p.strip() for p in spec["principals"])
    )


def test_no_caller_ever_reads_a_chunk_it_may_not(
    suite: Suite, request: pytest.FixtureRequest
) -> None:
    @settings(
        max_examples=examples(request),
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        print_blob=True,
    )
    @given(rounds())
    def run(round_: dict[str, Any]) -> None:
        leaks, stale = len(suite.ledger.leaks), len(suite.ledger.stale)
        suite.ledger.examples += 1
        ingest_round(suite, round_["docs"])
        for caller_spec, question, product in round_["questions"]:
            caller = make_caller(caller_spec)
            filters = [f"metadata.product={product}"] if product else []
            for strategy in STRATEGIES:
                response = suite.searcher.search(
                    question, caller=caller, k=10, strategy=strategy, filters=filters,
                    rerank=round_["rerank"] and strategy == "client-rrf",
                )  # fmt: skip
                suite.ledger.searches += 1
                for hit in response.hits:
                    check_text(suite, hit.text, caller_spec, f"{strategy} hit")
                    check_text(
                        suite, " ".join(hit.highlights), caller_spec, f"{strategy} highlight"
                    )
                    check_text(suite, " ".join(hit.title_path), caller_spec, f"{strategy} path")
            result = suite.context.build(
                question,
                caller=caller,
                strategy="client-rrf",
                filters=filters,
                expand=round_["expand"],
                rerank=round_["rerank"],
            )
            suite.ledger.contexts += 1
            for item in result.evidence:
                check_text(suite, item.text, caller_spec, f"context {round_['expand']}")
            check_text(suite, result.prompt, caller_spec, "prompt")
        assert suite.ledger.leaks[leaks:] == [], suite.ledger.leaks[leaks : leaks + 3]
        assert suite.ledger.stale[stale:] == [], suite.ledger.stale[stale : stale + 3]

    run()
    assert suite.ledger.searches > 0 and suite.ledger.checked > 0
    assert suite.ledger.leaks == [] and suite.ledger.stale == []
