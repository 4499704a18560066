"""Text analysis done in Python, identically for documents and queries.

Bare Elasticsearch test servers ship no language analyzers, and the ``standard`` analyzer
neither stems nor segments Chinese. So es-rag analyses text here and stores the terms,
space-joined, in ``content_terms`` / ``title_terms``, which the index maps with the prebuilt
``whitespace`` analyzer. A query is analysed by the same code, so a query term matches a
document term exactly when both came from the same word. That only holds while both sides use
the same analyzer; :attr:`TextAnalyzer.version` is recorded in the index's ``_meta`` and
compared at query time for that reason.

The ``whitespace`` analyzer does not lowercase and splits tokens longer than 255 characters, so
every term leaving this module is already case-folded, free of whitespace and at most 255
UTF-16 code units long (Lucene counts Java ``char``s, not code points).

Pipeline: NFKC -> casefold -> script runs. Han runs are folded from Traditional to
Simplified characters (OpenCC ``t2s``), then go to jieba (search mode); all other word
runs go through a regex tokenizer, then stopwords, then the Snowball stemmer. Identifiers such
as ``ERR_REFUND_1042`` are kept whole *and* split, see :meth:`TextAnalyzer._identifier`.
"""

from __future__ import annotations

import functools
import importlib.metadata
import logging
import re
import threading
import unicodedata
from collections.abc import Iterator
from typing import Any

import Stemmer

from es_rag import cjk
from es_rag.errors import ConfigurationError

__all__ = [
    "ANALYZER_NAME",
    "CHINESE_STOPWORDS",
    "ENGLISH_STOPWORDS",
    "MAX_TERM_LENGTH",
    "TextAnalyzer",
    "detect_language",
]

ANALYZER_NAME = "esrag"

# Bump whenever this module's own rules change in a way that can change output (tokenizer
# regex, identifier rules, normalisation). Stopword lists and the external libraries carry
# their own version components.
_RULES_VERSION = 1

MAX_TERM_LENGTH = 255
"""Lucene's whitespace tokenizer limit, in UTF-16 code units."""

# NLTK's English stopword list (179 words). It contains contraction fragments ("don", "t",
# "ll", "ve", ...) because, like NLTK's tokenizers, this module splits words at apostrophes:
# "don't" -> "don" + "t", both dropped; "boeing's" -> "boeing" + "s" -> "boe".
_ENGLISH_STOPWORDS_TEXT = """
    i me my myself we our ours ourselves you you're you've you'll you'd your yours yourself
    yourselves he him his himself she she's her hers herself it it's its itself they them their
    theirs themselves what which who whom this that that'll these those am is are was were be
    been being have has had having do does did doing a an the and but if or because as until
    while of at by for with about against between into through during before after above below
    to from up down in out on off over under again further then once here there when where why
    how all any both each few more most other some such no nor not only own same so than too
    very s t can will just don don't should should've now d ll m o re ve y ain aren aren't
    couldn couldn't didn didn't doesn doesn't hadn hadn't hasn hasn't haven haven't isn isn't
    ma mightn mightn't mustn mustn't needn needn't shan shan't shouldn shouldn't wasn wasn't
    weren weren't won won't wouldn wouldn't
"""
ENGLISH_STOPWORDS: frozenset[str] = frozenset(_ENGLISH_STOPWORDS_TEXT.split())
_ENGLISH_STOPWORDS_ID = "en-v1"

# Deliberately short: particles, conjunctions and demonstratives that jieba emits as their
# own tokens and that carry no topic. Negations (不, 没有) and pronouns stay, and so do
# particles that double as content words (地 "land", 得 "obtain").
_CHINESE_STOPWORDS_TEXT = """
    的 了 着 过 是 在 和 与 及 以及 或 或者 也 就 都 而 这 那 之 其 一个 什么 被 把 对 从 于 为
    所 等 吗 呢 吧 啊 呀 并 且 但 又 还 这个 那个 这些 那些 这是 即 则 由 以 将
"""
CHINESE_STOPWORDS: frozenset[str] = frozenset(_CHINESE_STOPWORDS_TEXT.split())
_CHINESE_STOPWORDS_ID = "zh-v1"

# Stopword lists per Snowball algorithm; languages without a list keep every word.
_STOPWORDS: dict[str, tuple[str, frozenset[str]]] = {
    "english": (_ENGLISH_STOPWORDS_ID, ENGLISH_STOPWORDS),
    "porter": (_ENGLISH_STOPWORDS_ID, ENGLISH_STOPWORDS),
}

# --- character classes -------------------------------------------------------------------

_HAN = cjk.HAN


def _mark_class() -> str:
    """Combining marks plus ZWNJ/ZWJ, as a regex character-class body.

    Python's ``\\w`` excludes combining marks, so without this Devanagari, Tamil or Persian
    words (all Snowball languages) would be cut at every vowel sign or zero-width joiner.
    """
    ranges: list[tuple[int, int]] = []
    for cp in range(0x20000):
        if unicodedata.category(chr(cp)) in ("Mn", "Mc", "Me"):
            if ranges and ranges[-1][1] == cp - 1:
                ranges[-1] = (ranges[-1][0], cp)
            else:
                ranges.append((cp, cp))
    ranges.append((0x200C, 0x200D))
    ranges.append((0xE0100, 0xE01EF))  # variation selectors supplement (Mn)
    return "".join(
        re.escape(chr(a)) + ("-" + re.escape(chr(b)) if b > a else "") for a, b in ranges
    )


@functools.cache
def _word_patterns() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """The token and word-part patterns, built at first use: the scan of the code points
    for marks takes a twentieth of a second, which a process that never analyses text (a
    re-ingest that finds every file unchanged only checks the analyzer's version) skips.
    """
    marks = _mark_class()
    # A word: starts with a word character that is not Han (letters, digits, underscore),
    # may continue with marks.
    word = rf"[^\W{_HAN}](?:[^\W{_HAN}]|[{marks}])*"
    # A compound: words joined by single '.', '-' or '/' (v2.3.1, covid-19, tcp/ip, e.g).
    token = re.compile(rf"(?P<han>[{_HAN}]+)|(?P<word>{word}(?:[./\-]{word})*)")
    part = re.compile(rf"[^\W\d_](?:[^\W\d_]|[{marks}])*|\d+")
    return token, part


_SEPARATOR_RE = re.compile(r"[./\-]")
_DIGIT_RE = re.compile(r"\d")
_DECIMAL_RE = re.compile(r"\d+\.\d+")
_MEMO_WORDS = 100_000  # distinct words an analyzer keeps the terms of (about 20 MB)
_SPACE_RE = re.compile(r"\s")

# Applied after NFKC: typographic apostrophes become "'" (a plain separator here), Unicode
# hyphens become "-" so "covid‐19" and "covid-19" analyse alike, soft hyphens (common in text
# extracted from PDFs) disappear so "hyphen\xadation" stays one word.
_TRANSLATE = str.maketrans(
    {
        "\u2019": "'",
        "\u2018": "'",
        "\u02bc": "'",
        "\u2010": "-",
        "\u2011": "-",
        "\u00ad": None,
    }
)

# --- jieba -------------------------------------------------------------------------------

_jieba_lock = threading.Lock()
_jieba_tokenizer: Any = None


def _jieba_version() -> str:
    try:
        return importlib.metadata.version("jieba")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - jieba is required
        return "unknown"


def _get_jieba() -> Any:
    """The module's own jieba tokenizer, built on first use.

    Private rather than jieba's global ``jieba.dt``: any code in the process may call
    ``jieba.add_word`` or ``load_userdict`` on the global one, which would silently change
    segmentation and break the match between indexed and query terms.

    The prefix dictionary is built straight from jieba's bundled ``dict.txt`` instead of via
    ``Tokenizer.initialize()``. That method writes ``jieba.cache`` into the shared temp dir
    and prefers an existing one there, so another process could feed us a different
    dictionary; building directly costs the same (~0.7 s once per process) and does no I/O
    beyond reading the bundled file. Shared by all analyzers: the dictionary is ~50 MB.
    """
    global _jieba_tokenizer
    if _jieba_tokenizer is not None:
        return _jieba_tokenizer
    with _jieba_lock:
        if _jieba_tokenizer is None:
            import jieba

            logging.getLogger("jieba").setLevel(logging.WARNING)
            tokenizer = jieba.Tokenizer()
            with tokenizer.get_dict_file() as dict_file:
                tokenizer.FREQ, tokenizer.total = tokenizer.gen_pfdict(dict_file)
            tokenizer.initialized = True
            _jieba_tokenizer = tokenizer
    return _jieba_tokenizer


# --- Traditional to Simplified ---------------------------------------------------------

_opencc_local = threading.local()


def _opencc_version() -> str:
    try:
        return importlib.metadata.version("opencc")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - opencc is required
        return "unknown"


def _to_simplified(run: str) -> str:
    """A Han run in Simplified characters, phrase-aware (OpenCC's ``t2s``: 乾燥 -> 干燥 but
    乾隆 stays), one converter per thread (~15 ms to build).

    jieba's dictionary is Simplified: on Traditional text it falls back to single
    characters (臺灣大學 -> 臺, 灣大學; 位於 -> 位, 於), and a Simplified question never
    matches a Traditional passage. Folding both sides first gives Traditional text the
    segmentation of its Simplified twin (BM25 nDCG@10 on DuReader-robust written in
    Traditional: .772 -> .818, the Simplified original's .819; scripts/han_fold_study.py)
    and lets either script find the other.
    """
    return _convert("t2s", run)


def _to_traditional(run: str) -> str:
    """The other way (OpenCC ``s2t``), for highlighting only: ``content`` is
    standard-analysed, so a Simplified question marks a Traditional passage only in its
    own characters."""
    return _convert("s2t", run)


def _convert(config: str, run: str) -> str:
    converters: dict[str, Any] | None = getattr(_opencc_local, "converters", None)
    if converters is None:
        converters = _opencc_local.converters = {}
    converter = converters.get(config)
    if converter is None:
        import opencc

        converter = converters[config] = opencc.OpenCC(config)
    out: str = converter.convert(run)
    return out


# --- helpers -----------------------------------------------------------------------------


def _truncate(term: str) -> str:
    """Cut a term to what Lucene keeps as one token (255 UTF-16 code units).

    Longer tokens would be split by the ``whitespace`` tokenizer into pieces a query never
    produces; truncating keeps one term, identical on both sides.
    """
    if len(term) <= MAX_TERM_LENGTH // 2:
        return term
    units = 0
    for i, ch in enumerate(term):
        units += 2 if ord(ch) > 0xFFFF else 1
        if units > MAX_TERM_LENGTH:
            return term[:i]
    return term


def _normalise(text: str) -> str:
    return unicodedata.normalize("NFKC", text).translate(_TRANSLATE).casefold()


def detect_language(text: str, default: str = "en") -> str:
    """``"zh"`` when Han characters dominate ``text``, else ``default``.

    Script counting rather than a statistical detector (langdetect, fastText): queries are
    two to five words, where statistical detectors are unreliable and some are not even
    deterministic, and a query must be classified like the documents it should match. The
    analyzer itself already handles mixed text by script run, so the only question left is
    which script carries the text, and counting answers that cheaply and predictably.

    A Han character carries roughly what three Latin letters do (one morpheme versus a
    syllable), so Han characters are weighted by three: "用Python写代码" is Chinese,
    "the Python 代码 module" is not.
    """
    if not cjk.has_han(text):
        return default  # most text: one scan in C instead of a Python loop per character
    han = 0
    other = 0
    for ch in text:
        if cjk.is_han(ch):
            han += 1
        elif ch.isalpha():
            other += 1
    if han and 3 * han >= other:
        return "zh"
    return default


# --- the analyzer ------------------------------------------------------------------------


class TextAnalyzer:
    """Turns text into the terms es-rag indexes and queries with.

    Construction is cheap (no jieba): most deployments index Latin-script text only, and
    CLI commands that never analyse text should not pay ~0.7 s for a Chinese dictionary.
    Instances are safe to share between threads.
    """

    def __init__(self, language: str = "english", *, han_fold: bool = True) -> None:
        name = language.strip().lower()
        algorithms = Stemmer.algorithms()
        if name not in algorithms:
            raise ConfigurationError(
                f"unknown analyzer language {language!r}; choose one of: {', '.join(algorithms)}"
            )
        self.language = name
        self.han_fold = han_fold
        self._stop_id, self._stopwords = _STOPWORDS.get(name, ("none", frozenset()))
        # PyStemmer instances keep internal state and must not be used concurrently.
        self._local = threading.local()
        # A word's terms, which depend on nothing else (shared by threads: a dict's get
        # and set are atomic).
        self._memo: dict[str, tuple[str, ...]] = {}
        self._version = (
            f"{ANALYZER_NAME}-{_RULES_VERSION};stem={name};pystemmer={Stemmer.version()};"
            f"stop={self._stop_id};zh=jieba-{_jieba_version()}-search;zhstop={_CHINESE_STOPWORDS_ID}"
        )
        if han_fold:
            self._version += f";zhfold=opencc-{_opencc_version()}-t2s"

    def __repr__(self) -> str:
        return f"TextAnalyzer(language={self.language!r}, han_fold={self.han_fold!r})"

    def variant(self, version: str) -> TextAnalyzer | None:
        """This analyzer, or the one an index recorded as ``version`` if this code can still
        make it; None when it cannot.

        Indices analysed before Traditional-to-Simplified folding keep being written and
        queried without it (their terms would not match otherwise) until ``es-rag migrate``
        re-analyses them into a new generation.
        """
        if version == self._version:
            return self
        if self.han_fold:
            plain = TextAnalyzer(self.language, han_fold=False)
            if version == plain.version:
                return plain
        return None

    @property
    def version(self) -> str:
        """Identifies every input to the output: rules, stemmer, stopwords, jieba, OpenCC.

        The Python Unicode database is left out on purpose: a new Python only changes how
        rare characters fold, and naming it would make every Python upgrade refuse to query
        existing indices.
        """
        return self._version

    def analyze(self, text: str) -> str:
        """The terms as one string, ready for a ``whitespace``-analysed field."""
        return " ".join(self.terms(text))

    def terms(self, text: str) -> list[str]:
        if not text:
            return []
        out: list[str] = []
        for match in _word_patterns()[0].finditer(_normalise(text)):
            han = match.group("han")
            if han is not None:
                out.extend(self._han_terms(han))
            else:
                word = match.group("word")
                terms = self._memo.get(word)
                if terms is None:
                    # Words repeat (Zipf): a dict lookup instead of the rules and the
                    # stemmer for most of them, a fifth of a worker's time outside
                    # embedding. Bounded: cleared whole when full.
                    terms = tuple(self._token_terms(word))
                    if len(self._memo) >= _MEMO_WORDS:
                        self._memo.clear()
                    self._memo[word] = terms
                out.extend(terms)
        return out

    def highlight_words(self, text: str) -> str:
        """The question's words as written, without stopwords: what highlights mark in the
        standard-analysed ``content``. Stems would not match there, and stopwords would
        mark every "a" of a passage. Empty when every word is a stopword. With folding, a
        Han run comes in both scripts, since BM25 matched passages written in either."""
        out: list[str] = []
        for match in _word_patterns()[0].finditer(_normalise(text)):
            han = match.group("han")
            if han is not None:
                out.append(han)
                if self.han_fold:
                    out.extend(
                        dict.fromkeys(
                            o for o in (_to_simplified(han), _to_traditional(han)) if o != han
                        )
                    )
            elif match.group("word") not in self._stopwords:
                out.append(match.group("word"))
        return " ".join(out)

    # -- internals --------------------------------------------------------------------

    def _stemmer(self) -> Any:
        stemmer = getattr(self._local, "stemmer", None)
        if stemmer is None:
            stemmer = Stemmer.Stemmer(self.language)
            self._local.stemmer = stemmer
        return stemmer

    def _word(self, word: str) -> str | None:
        """A plain alphabetic word: stopword check on the surface form, then stem."""
        if word in self._stopwords:
            return None
        stem: str = self._stemmer().stemWord(word)
        return _truncate(stem) if stem else None

    def _han_terms(self, run: str) -> Iterator[str]:
        """Segment a Han run with jieba's search mode.

        Search mode emits a long word's dictionary sub-words before the word itself
        (北京大学 -> 北京, 大学, 北京大学). Queries are short and often name only part of a
        compound, so the sub-words buy recall; a query using the full compound produces the
        same set, so an exact match still scores highest. Precise mode (``lcut``) would make
        北京 miss every document that wrote 北京大学.
        """
        if self.han_fold:
            run = _to_simplified(run)
        for word in _get_jieba().lcut_for_search(run):
            if word and word not in CHINESE_STOPWORDS and not _SPACE_RE.search(word):
                yield _truncate(word)

    def _token_terms(self, token: str) -> Iterator[str]:
        if "_" in token or _DIGIT_RE.search(token):
            yield from self._identifier(token)
            return
        if not _SEPARATOR_RE.search(token):
            term = self._word(token)
            if term is not None:
                yield term
            return
        pieces = _SEPARATOR_RE.split(token)
        if "." in token and all(len(p) == 1 for p in pieces):
            # Dotted acronyms (u.s.a, e.g): one word, so "USA" and "U.S.A." match.
            term = self._word("".join(pieces))
            if term is not None:
                yield term
            return
        # Hyphenated or slashed words without digits (well-known, and/or): just words.
        for piece in pieces:
            term = self._word(piece)
            if term is not None:
                yield term

    def _identifier(self, token: str) -> Iterator[str]:
        """An identifier, code or number: the whole token plus its letter and digit parts.

        The whole token (never stemmed) makes an exact identifier query score highest; the
        parts (words stemmed, numbers as-is) let "refund" or "1042" find ERR_REFUND_1042.
        Query and document analyse the identifier to the same set of terms.
        """
        if _DECIMAL_RE.fullmatch(token):
            yield token  # 3.14 is a number, not 3 and 14
            return
        whole = _truncate(token)
        parts = _word_patterns()[1].findall(token)
        if not parts:
            return  # only underscores: nothing to search for
        if len(parts) == 1 and parts[0] == token:
            yield whole  # a bare number: 1042
            return
        yield whole
        for part in parts:
            if part[0].isdigit():
                yield _truncate(part)
            else:
                term = self._word(part)
                if term is not None:
                    yield term
