"""Text helpers shared by extraction and search: tokens, sentences, dates. Pure.

One module: documents and queries must be tokenised, split and dated by the very same
functions, or a question would stop meeting its answer; the stemmer, stopwords and date
patterns are their tables.

Tokens are what BM25 counts: lower-cased runs of letters and digits (any
script), English stopwords removed, inflections stripped (Porter's steps 1 and 5,
so ``databases`` meets ``database`` and ``plotting`` meets ``plots``), and CJK runs cut into
character bigrams (Chinese and Japanese have no spaces). The same function
tokenises documents and queries, so they always agree.
"""

from __future__ import annotations

import calendar
import re
import time

STOPWORDS = frozenset(
    [
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "also",
        "am",
        "an",
        "and",
        "any",
        "are",
        "aren",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "cannot",
        "could",
        "couldn",
        "did",
        "didn",
        "do",
        "does",
        "doesn",
        "doing",
        "don",
        "down",
        "during",
        "each",
        "else",
        "ever",
        "few",
        "for",
        "from",
        "further",
        "get",
        "gets",
        "got",
        "had",
        "hadn",
        "has",
        "hasn",
        "have",
        "haven",
        "having",
        "he",
        "her",
        "here",
        "hers",
        "herself",
        "him",
        "himself",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "isn",
        "it",
        "its",
        "itself",
        "just",
        "let",
        "lets",
        "like",
        "ll",
        "me",
        "more",
        "most",
        "much",
        "my",
        "myself",
        "no",
        "nor",
        "not",
        "now",
        "of",
        "off",
        "ok",
        "okay",
        "on",
        "once",
        "only",
        "or",
        "other",
        "ought",
        "our",
        "ours",
        "ourselves",
        "out",
        "over",
        "own",
        "please",
        "re",
        "same",
        "shall",
        "she",
        "should",
        "shouldn",
        "so",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "theirs",
        "them",
        "themselves",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "us",
        "ve",
        "very",
        "was",
        "wasn",
        "we",
        "were",
        "weren",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "won",
        "would",
        "wouldn",
        "yes",
        "yet",
        "you",
        "your",
        "yours",
        "yourself",
        "yourselves",
        "again",
        "anything",
        "something",
        "thing",
        "things",
        "really",
        "want",
        "wanted",
        "know",
        "tell",
        "told",
        "say",
        "said",
        "use",
        "used",
        "uses",
        "using",
    ]
)

# Han, Hiragana, Katakana, Hangul: scripts written without spaces between words.
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")
_WORD = re.compile(r"[^\W_]+")
_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s+|\n+")


def _consonant(word: str, i: int) -> bool:
    c = word[i]
    if c in "aeiou":
        return False
    if c == "y":
        return i == 0 or not _consonant(word, i - 1)
    return True


def _measure(stem: str) -> int:
    """Porter's m: the number of vowel-consonant sequences in ``stem``."""
    m, vowel_seen = 0, False
    for i in range(len(stem)):
        if _consonant(stem, i):
            if vowel_seen:
                m += 1
                vowel_seen = False
        else:
            vowel_seen = True
    return m


def _has_vowel(stem: str) -> bool:
    return any(not _consonant(stem, i) for i in range(len(stem)))


def _cvc(word: str) -> bool:
    n = len(word)
    return (
        n >= 3
        and _consonant(word, n - 3)
        and not _consonant(word, n - 2)
        and _consonant(word, n - 1)
        and word[-1] not in "wxy"
    )


def stem(word: str) -> str:
    """Porter's steps 1a-1c and 5 (inflections, not derivations): ``plotting``/``plots`` → ``plot``,
    ``used``/``uses``/``use`` → ``us``, ``libraries``/``library`` → ``librari``, ``databases`` → ``databas``."""
    if len(word) <= 2 or not word.isascii() or not word.isalpha():
        return word
    # 1a
    if word.endswith("sses") or word.endswith("ies"):
        word = word[:-2]
    elif word.endswith("s") and not word.endswith("ss"):
        word = word[:-1]
    # 1b
    if word.endswith("eed"):
        if _measure(word[:-3]) > 0:
            word = word[:-1]
    else:
        for suffix in ("ed", "ing"):
            if word.endswith(suffix) and _has_vowel(word[: -len(suffix)]):
                word = word[: -len(suffix)]
                if word.endswith(("at", "bl", "iz")):
                    word += "e"
                elif (
                    len(word) >= 2
                    and word[-1] == word[-2]
                    and _consonant(word, len(word) - 1)
                    and word[-1] not in "lsz"
                ):
                    word = word[:-1]
                elif _measure(word) == 1 and _cvc(word):
                    word += "e"
                break
    # 1c
    if word.endswith("y") and _has_vowel(word[:-1]):
        word = word[:-1] + "i"
    # 5a, 5b
    if word.endswith("e"):
        m = _measure(word[:-1])
        if m > 1 or (m == 1 and not _cvc(word[:-1])):
            word = word[:-1]
    if word.endswith("ll") and _measure(word) > 1:
        word = word[:-1]
    return word


def tokens(text: str) -> list[str]:
    """The terms of ``text`` in order (repeats kept: they are term frequencies)."""
    out: list[str] = []
    for word in _WORD.findall(text.lower()):
        if _CJK.search(word):
            out.extend(_cjk_terms(word))
        elif word not in STOPWORDS and (len(word) > 1 or word.isdigit()):
            out.append(stem(word))
    return out


def _cjk_terms(word: str) -> list[str]:
    """Latin pieces as words, CJK runs as overlapping bigrams (a lone character as itself)."""
    out: list[str] = []
    for run in re.findall(
        r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]+|[^\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]+",
        word,
    ):
        if _CJK.match(run):
            out.extend([run] if len(run) == 1 else [run[i : i + 2] for i in range(len(run) - 1)])
        elif run not in STOPWORDS and len(run) > 1:
            out.append(stem(run))
    return out


_MONTHS = {
    m: i
    for i, names in enumerate(
        (
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ),
        1,
    )
    for m in names
}
_MONTH = (
    r"(january|february|march|april|may|june|july|august|september|october|november|"
    r"december|"
    r"jan|feb|mar|apr|jun|jul|aug|sept|sep|oct|nov|dec)\.?"
)
_DAY = r"(\d{1,2})(?:st|nd|rd|th)?"
_DATES = (  # (pattern, group of year, month, day); a month name counts only next to a day or a year
    (re.compile(r"\b(\d{4})-(\d{1,2})-(\d{1,2})\b"), 1, 2, 3),
    (re.compile(rf"\b{_DAY}\s+(?:of\s+)?{_MONTH},?\s+(\d{{4}})\b", re.I), 3, 2, 1),
    (re.compile(rf"\b{_MONTH}\s+{_DAY},?\s+(\d{{4}})\b", re.I), 3, 1, 2),
    (re.compile(rf"\b{_DAY}\s+(?:of\s+)?{_MONTH}\b(?!,?\s+\d)", re.I), None, 2, 1),
    (re.compile(rf"\b{_MONTH}\s+{_DAY}\b(?!,?\s+\d{{4}})(?!\d)", re.I), None, 1, 2),
    (re.compile(rf"\b{_MONTH},?\s+(\d{{4}})\b", re.I), 2, 1, None),
)


def date_terms(text: str) -> list[str]:
    """Canonical terms of the calendar dates written in ``text``: ``8 May 2023``, ``May 8, 2023``
    and ``2023-05-08`` all give ``@2023-05-08 @2023-05 @05-08``; ``May 2023`` gives ``@2023-05``;
    ``May 8th`` gives ``@05-08``. Documents and queries share them, so a question naming a date
    meets the passages of that day (a session's date is added to its passages)."""
    out: list[str] = []
    taken: list[tuple[int, int]] = []
    for pattern, gy, gm, gd in _DATES:
        for match in pattern.finditer(text):
            if any(a < match.end() and match.start() < b for a, b in taken):
                continue  # part of a longer date already read
            month = match.group(gm)
            month = int(month) if month.isdigit() else _MONTHS.get(month.lower().rstrip("."))
            day = int(match.group(gd)) if gd else None
            year = int(match.group(gy)) if gy else None
            if not month or not 1 <= month <= 12 or (day is not None and not 1 <= day <= 31):
                continue
            taken.append(match.span())
            out.extend(calendar_terms(year, month, day))
    return out


def calendar_terms(year: int | None, month: int, day: int | None) -> list[str]:
    """The terms :func:`date_terms` gives for one date (day and year optional)."""
    out = []
    if year and day:
        out.append(f"@{year:04d}-{month:02d}-{day:02d}")
    if year:
        out.append(f"@{year:04d}-{month:02d}")
    if day:
        out.append(f"@{month:02d}-{day:02d}")
    return out


def time_terms(ms: int | None) -> list[str]:
    """The :func:`date_terms` of the (UTC) day of a millisecond timestamp."""
    if not ms:
        return []
    day = time.gmtime(ms / 1000)
    return calendar_terms(day.tm_year, day.tm_mon, day.tm_mday)


def long_date(ms: int | None) -> str:
    """``8 May 2023`` (UTC) of a millisecond timestamp, "" for none."""
    if not ms:
        return ""
    day = time.gmtime(ms / 1000)
    return f"{day.tm_mday} {time.strftime('%B %Y', day)}"


def sentences(text: str) -> list[str]:
    """Sentences and lines of ``text``, stripped of Markdown bullets and headings."""
    out = []
    for piece in _SENTENCE_END.split(text):
        piece = re.sub(r"^\s*(?:[-*+•]|\d+[.)]|#{1,6}|>)\s+", "", piece).strip()
        if piece:
            out.append(piece)
    return out


def one_line(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def iso_date(ms: int | None) -> str:
    """``YYYY-MM-DD`` (UTC) of a millisecond timestamp, "" for none."""
    return time.strftime("%Y-%m-%d", time.gmtime(ms / 1000)) if ms else ""


def iso_time(ms: int | None) -> str:
    """``YYYY-MM-DDTHH:MM:SS.mmmZ`` (UTC) of a millisecond timestamp, "" for none."""
    return (
        time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + f".{ms % 1000:03d}Z"
        if ms
        else ""
    )


def parse_time(text: str) -> int | None:
    """Milliseconds from ``YYYY-MM-DD``, ``YYYY-MM-DDTHH:MM:SSZ`` or ``…SS.mmmZ`` (UTC), None if none."""
    text = text.strip()
    millis = 0
    match = re.fullmatch(r"(.*T\d\d:\d\d:\d\d)\.(\d{1,3})Z", text)
    if match:
        text, millis = match.group(1) + "Z", int(match.group(2).ljust(3, "0"))
    for fmt in ("%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%d"):
        try:
            return calendar.timegm(time.strptime(text, fmt)) * 1000 + millis
        except ValueError:
            continue
    return None
