"""The Python analyzer: documents and queries must come out as matching terms."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from es_rag.analysis import (
    ANALYZER_NAME,
    CHINESE_STOPWORDS,
    ENGLISH_STOPWORDS,
    MAX_TERM_LENGTH,
    TextAnalyzer,
    detect_language,
)
from es_rag.errors import ConfigurationError

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def en() -> TextAnalyzer:
    return TextAnalyzer("english")


# --- English -----------------------------------------------------------------------------


def test_english_stems(en: TextAnalyzer) -> None:
    assert en.terms("running") == ["run"]
    assert en.terms("runs") == ["run"]
    assert en.terms("aerodynamic") == en.terms("aerodynamics")
    assert len(en.terms("aerodynamic")) == 1


def test_lowercases_and_normalises(en: TextAnalyzer) -> None:
    assert en.terms("WING Wing wing") == ["wing", "wing", "wing"]
    # NFKC folds full-width forms; casefold folds ß.
    assert en.terms("ＷＩＮＧ") == ["wing"]
    assert en.terms("STRASSE") == en.terms("Straße")


def test_stopwords_dropped(en: TextAnalyzer) -> None:
    assert en.terms("the wing of an aircraft") == ["wing", "aircraft"]
    assert en.terms("the of and a to is") == []
    assert 150 <= len(ENGLISH_STOPWORDS) <= 180


def test_apostrophes(en: TextAnalyzer) -> None:
    assert en.terms("don't") == []
    assert en.terms("Boeing's wing") == en.terms("boeing wing") == ["boe", "wing"]
    # Typographic apostrophes behave like ASCII ones.
    assert en.terms("Boeing’s") == en.terms("Boeing's")


def test_hyphenated_words_split(en: TextAnalyzer) -> None:
    assert en.terms("well-known") == ["well", "known"]
    assert en.terms("state-of-the-art") == ["state", "art"]


def test_dotted_acronyms_join(en: TextAnalyzer) -> None:
    assert en.terms("U.S.A.") == en.terms("USA")


def test_numbers_kept(en: TextAnalyzer) -> None:
    assert en.terms("1042") == ["1042"]
    assert en.terms("pi is 3.14") == ["pi", "3.14"]


# --- identifiers -------------------------------------------------------------------------


def test_identifier_whole_and_parts(en: TextAnalyzer) -> None:
    terms = en.terms("ERR_REFUND_1042")
    assert terms[0] == "err_refund_1042"
    assert set(terms) == {"err_refund_1042", "err", "refund", "1042"}


def test_identifier_parts_are_stemmed_whole_is_not(en: TextAnalyzer) -> None:
    terms = en.terms("PAYMENTS_FAILED_7")
    assert "payments_failed_7" in terms
    assert {"payment", "fail", "7"} <= set(terms)


@pytest.mark.parametrize(
    ("text", "whole", "parts"),
    [
        ("v2.3.1", "v2.3.1", {"v", "2", "3", "1"}),
        ("ISO-8859-1", "iso-8859-1", {"iso", "8859", "1"}),
        ("COVID-19", "covid-19", {"covid", "19"}),
        ("__init__", "__init__", {"init"}),
    ],
)
def test_dotted_and_hyphenated_identifiers(
    en: TextAnalyzer, text: str, whole: str, parts: set[str]
) -> None:
    terms = en.terms(text)
    assert terms[0] == whole
    assert set(terms[1:]) == parts


def test_query_for_part_matches_identifier(en: TextAnalyzer) -> None:
    doc = set(en.terms("Refund failed with ERR_REFUND_1042 for order 77"))
    assert set(en.terms("refunds")) <= doc
    assert set(en.terms("ERR_REFUND_1042")) <= doc
    assert "err_refund_1042" not in en.terms("refund error 1042")


def test_unicode_hyphen_matches_ascii_hyphen(en: TextAnalyzer) -> None:
    assert en.terms("covid\u201019") == en.terms("covid-19")


def test_soft_hyphen_removed(en: TextAnalyzer) -> None:
    assert en.terms("aero\u00addynamics") == en.terms("aerodynamics")


# --- Chinese -----------------------------------------------------------------------------


def test_chinese_segmented(en: TextAnalyzer) -> None:
    terms = en.terms("北京大学")
    # Search mode: sub-words and the compound.
    assert {"北京", "大学", "北京大学"} <= set(terms)
    assert {"机器", "学习"} <= set(en.terms("机器学习"))


def test_chinese_stopwords_and_punctuation_dropped(en: TextAnalyzer) -> None:
    terms = en.terms("北京大学的机器学习，是一个研究领域。")
    assert "的" not in terms
    assert "是" not in terms
    assert "一个" not in terms
    assert not {"，", "。", ",", "."} & set(terms)
    assert "研究" in terms
    assert 30 <= len(CHINESE_STOPWORDS) <= 50


def test_chinese_numbers_kept(en: TextAnalyzer) -> None:
    terms = en.terms("2018年发布")
    assert "2018" in terms
    assert "发布" in terms


def test_mixed_english_chinese(en: TextAnalyzer) -> None:
    terms = en.terms("我们用Elasticsearch的BM25算法进行检索 and running queries")
    assert "elasticsearch" in terms
    assert {"bm25", "bm", "25"} <= set(terms)
    assert {"算法", "检索"} <= set(terms)
    assert {"run", "queri"} <= set(terms)
    assert "的" not in terms
    assert "and" not in terms


def test_chinese_query_subset_of_document(en: TextAnalyzer) -> None:
    doc = set(en.terms("清华大学和北京大学都在研究机器学习与自然语言处理。"))
    for query in ("北京大学", "北京", "机器学习", "自然语言处理"):
        assert set(en.terms(query)) <= doc, query


# --- consistency and hygiene ------------------------------------------------------------


@pytest.mark.parametrize(
    "phrase",
    [
        "aerodynamic heating",
        "Boundary-layer control",
        "ERR_REFUND_1042",
        "version v2.3.1",
        "the pressure distribution",
        "U.S.A.",
    ],
)
def test_phrase_terms_are_subset_of_document_terms(en: TextAnalyzer, phrase: str) -> None:
    document = (
        "An experimental study of aerodynamic heating and boundary-layer control "
        f"was made; see {phrase} (U.S.A.) for the pressure distribution, "
        "error ERR_REFUND_1042 in version v2.3.1."
    )
    assert set(en.terms(phrase)) <= set(en.terms(document))


@pytest.mark.parametrize("text", ["", "   ", "\n\t ", "...!!! ,;:", "—", "。，！", "___", "the of"])
def test_empty_input(en: TextAnalyzer, text: str) -> None:
    assert en.terms(text) == []
    assert en.analyze(text) == ""


def test_analyze_joins_terms(en: TextAnalyzer) -> None:
    text = "Running ERR_REFUND_1042 北京大学"
    assert en.analyze(text) == " ".join(en.terms(text))


def test_terms_are_clean_and_bounded(en: TextAnalyzer) -> None:
    text = (
        "x" * 1000
        + " "
        + "y_" * 400
        + " 北京\u3000大学 a\u00a0b hello\u200bworld "
        + "\U00020000" * 300
        + " ＡＢＣ"
    )
    terms = en.terms(text)
    assert terms
    for term in terms:
        assert term
        assert not any(ch.isspace() for ch in term)
        assert len(term.encode("utf-16-le")) // 2 <= MAX_TERM_LENGTH
        assert term == term.casefold()
    assert "x" * 255 in terms


def test_deterministic(en: TextAnalyzer) -> None:
    text = "北京大学的机器学习 ERR_REFUND_1042 running aerodynamics"
    assert en.terms(text) == en.terms(text) == TextAnalyzer("english").terms(text)


def test_thread_safe(en: TextAnalyzer) -> None:
    texts = [f"running aerodynamics 机器学习 item_{i}" for i in range(200)]
    expected = [en.terms(t) for t in texts]
    results: list[list[list[str]]] = []

    def work() -> None:
        results.append([en.terms(t) for t in texts])

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [expected] * 4


def test_indic_vowel_signs_stay_in_word() -> None:
    # Python's \w excludes combining marks; a Hindi word must not be cut at them.
    assert len(TextAnalyzer("hindi").terms("हिन्दी भाषा")) == 2


# --- configuration -----------------------------------------------------------------------


def test_version(en: TextAnalyzer) -> None:
    assert en.version.startswith(f"{ANALYZER_NAME}-")
    assert "english" in en.version
    assert "jieba" in en.version
    german = TextAnalyzer("german")
    assert "german" in german.version
    assert german.version != en.version
    assert TextAnalyzer("English").version == en.version
    assert not any(ch.isspace() for ch in en.version)


def test_traditional_and_simplified_chinese_give_the_same_terms(en: TextAnalyzer) -> None:
    traditional = en.terms("臺灣大學的圖書館藏書豐富，位於臺北市")
    assert traditional == en.terms("台湾大学的图书馆藏书丰富，位于台北市")
    # Segmented as words, not the single characters jieba falls back to on Traditional text.
    assert {"台湾大学", "图书馆", "位于", "台北市"} <= set(traditional)
    # Phrase-aware (OpenCC t2s): 乾 is 干 in 乾燥 but stays in 乾隆.
    assert "干燥" in en.terms("乾燥的天氣") and "乾隆" in "".join(en.terms("乾隆皇帝"))


def test_without_folding_traditional_text_falls_apart_and_the_version_says_so(
    en: TextAnalyzer,
) -> None:
    plain = TextAnalyzer("english", han_fold=False)
    assert "图书馆" not in plain.terms("圖書館藏書")
    assert plain.terms("图书馆") == en.terms("图书馆")
    assert "zhfold=opencc-" in en.version and "zhfold" not in plain.version
    assert en.version.startswith(plain.version)
    # An index analysed without folding gets the analyzer that made it; nothing else does.
    assert en.variant(en.version) is en
    made = en.variant(plain.version)
    assert made is not None and made.version == plain.version and not made.han_fold
    assert en.variant(TextAnalyzer("german", han_fold=False).version) is None
    assert plain.variant(en.version) is None


def test_other_language_has_no_stopwords() -> None:
    german = TextAnalyzer("german")
    assert german.terms("die Häuser und the") == ["die", "haus", "und", "the"]


def test_unknown_language() -> None:
    with pytest.raises(ConfigurationError, match="klingon"):
        TextAnalyzer("klingon")


def test_language_is_canonical() -> None:
    assert TextAnalyzer(" French ").language == "french"


# --- detect_language ---------------------------------------------------------------------


def test_detect_chinese() -> None:
    assert detect_language("北京大学的机器学习研究") == "zh"
    assert detect_language("我们用Python写代码") == "zh"


def test_detect_english() -> None:
    assert detect_language("An experimental study of a wing") == "en"
    assert detect_language("the Python 代码 module for search engines") == "en"


def test_detect_default() -> None:
    assert detect_language("", default="de") == "de"
    assert detect_language("12345 !!!") == "en"
    assert detect_language("Ein Haus", default="de") == "de"


def test_english_text_does_not_load_jieba() -> None:
    # A fresh interpreter: jieba may already be loaded in this one by other tests.
    code = (
        "import sys\n"
        "from es_rag.analysis import TextAnalyzer\n"
        "assert TextAnalyzer().terms('Running ERR_REFUND_1042') \n"
        "assert 'jieba' not in sys.modules, 'jieba imported for English text'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_highlight_words_keep_the_surface_form_without_stopwords() -> None:
    a = TextAnalyzer("english")
    assert a.highlight_words("How long does a refund take?") == "long refund take"
    assert a.highlight_words("the a of") == ""
    assert a.highlight_words("北京大学 VPN-token") == "北京大学 北京大學 vpn-token"
    # BM25 matches either script, so the highlights look for both.
    assert a.highlight_words("圖書館") == "圖書館 图书馆"
    assert TextAnalyzer(han_fold=False).highlight_words("图书馆") == "图书馆"


def test_remembered_terms_are_the_rules_terms(monkeypatch: pytest.MonkeyPatch) -> None:
    """A word's terms come from memory after its first sight; memory must change nothing,
    and stays bounded (cleared whole when full)."""
    import es_rag.analysis as analysis

    text = (
        "The ERR_REFUND_1042 handler re-runs U.S.A. well-known jobs at 3.14 speed; running "
        "runners ran. The handler re-runs jobs: 北京大学 and the runners"
    )
    expected = TextAnalyzer("english").terms(text)
    monkeypatch.setattr(analysis, "_MEMO_WORDS", 4)
    warm = TextAnalyzer("english")
    assert warm.terms(text) == expected
    assert warm.terms(text) == expected  # from memory, cleared on the way
    assert 0 < len(warm._memo) <= 4
