"""What a session taught us, as four bullet lists: decisions, preferences and
constraints, facts learned, open tasks.

One module: both extractors produce the same notes from the same transcript, and the rules'
cue phrases also decide (``classify``, ``is_request``) what search counts as a statement.

Two extractors with one output shape, ``{kind: [Note, …]}``:

- :func:`extract_llm` asks a model (any ``complete(messages) -> str``) for the
  four lists as Markdown and parses them; ``None`` when the answer has none of
  the four headings (the caller then falls back to the rules).
- :func:`extract_rules` is deterministic and offline: it splits the user's and
  the assistant's text into sentences and keeps those that match cue phrases
  ("we decided", "I prefer", "never", "TODO", "X is 5433", …). The user's
  words count for all four kinds; the assistant's only for facts it found,
  tasks it left open and decisions stated as such.

Within one session a later statement overrides an earlier one on the same
subject (:func:`supersedes`), so "actually, use port 6543" replaces "port 5433".
Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from ..core.messages import (
    AssistantMessage,
    TextPart,
    UserMessage,
    WithParts,
)
from ..render.for_model import EXTRACTION, model_transcript
from .text import one_line, sentences, tokens

KINDS = ("decisions", "preferences", "facts", "tasks")
TITLES = {
    "decisions": "Decisions",
    "preferences": "Preferences and constraints",
    "facts": "Facts learned",
    "tasks": "Open tasks",
}
MAX_PER_KIND = 15
MAX_NOTE_CHARS = 300


@dataclass(frozen=True)
class Note:
    """One remembered statement and, when known, the message it came from."""

    text: str
    message_id: str | None = None


Extraction = dict[str, list[Note]]


def empty() -> Extraction:
    return {kind: [] for kind in KINDS}


def count(extraction: Extraction) -> int:
    return sum(len(v) for v in extraction.values())


# --------------------------------------------------------------------------
# rules

_I = re.IGNORECASE
_TASK = re.compile(
    r"\b(todo|to-do|to do next|next steps?|still (?:need|needs|have|has) to|remaining|left to do|follow[- ]up|"
    r"not (?:done|finished|implemented) yet|haven'?t (?:yet )?(?:done|finished|added)|we(?:'ll| will) need to|"
    r"need(?:s)? to be (?:done|fixed|added|written)|open question|pending|later(?:,| we| on)|tomorrow|"
    r"remind me|don'?t forget|backlog)\b|^\s*\[ \]",
    _I,
)
_DECISION = re.compile(
    r"\b(we(?:'ve)? decided|decided to|decision|let'?s (?:use|go with|switch|keep|stick|move|adopt)|"
    r"we(?:'ll| will| are going to) (?:use|go with|switch|keep|stick|move|adopt)|going with|go with|chose|"
    r"settled on|switch(?:ed)? (?:to|over)|from now on|agreed|instead of|we use|we'?re using|our choice|"
    r"the plan is|plan is to|standardi[sz]e on|moving forward)\b",
    _I,
)
_PREFERENCE = re.compile(
    r"\b(i (?:prefer|like|want|hate|dislike|love|need)|i'?d (?:rather|like|prefer)|prefer(?:s|red)?|always|never|"
    r"don'?t|do not|must(?: not)?|mustn'?t|should(?: not)?|shouldn'?t|avoid|make sure|only (?:use|ever)|"
    r"no more than|at most|at least|keep (?:it|them|the|everything|all)|stick to|required|requirement|"
    r"constraint|not allowed|forbidden|please (?:use|keep|write|answer|reply|respond|format))\b",
    _I,
)
_FACT_CUE = re.compile(
    r"\b(fyi|note that|for the record|remember that|turns out|it turns out|we found|i found|found that|"
    r"discovered|it seems|the (?:result|answer|reason|cause|culprit) (?:is|was)|there (?:are|were|is) \d)",
    _I,
)
_COPULA = re.compile(
    r"\b(is|are|was|were|has|have|had|lives?|listens?|runs?|ran|located|stored|saved|kept|hosted|contains?|"
    r"holds?|uses|used|points? to|equals|means|owns?|belongs?|moved|changed|became|costs?|takes?|returns?|"
    r"expects?|lasts?|weighs?|totals?|averages?)\b|=|:",
    _I,
)
_SPECIFIC = re.compile(
    r"\d|`[^`]+`|\"[^\"]+\"|'[^']{2,}'|\b\w+[_./]\w+|\b[A-Z][a-z]+[A-Z]\w*|(?<![.!?]\s)(?<!^)\b[A-Z][a-zA-Z]{2,}",
    0,
)
_QUESTION = re.compile(
    r"\?\s*$|^(?:what|which|where|when|who|why|how|can|could|would|should|do|does|did|is|are)\b.*\?",
    _I,
)
_FILLER = re.compile(
    r"^(?:note that|remember that|keep in mind that|for the record|for your information|just so you know|"
    r"ok(?:ay)?|so|also|and|btw|by the way|fyi|note|heads[- ]up|update|reminder|remember|ps|p\.s\.|well|"
    r"actually|oh|hi|hello|hey|great|thanks|thank you|sure|noted|got it|understood)\b[\s,:;!.\-—]*",
    _I,
)
_ASSISTANT_NOISE = re.compile(
    r"^(?:sure|certainly|of course|here(?:'s| is)|let me|i(?:'ll| will) |i can|i'?m going|i have|"
    r"happy to|great|thanks|you'?re welcome|as requested|done\b)",
    _I,
)
_CODE = re.compile(
    r"^(?:```|\s{4}|>>>|\$ |import |from \w+ import|def |class |\w+\s*=\s*[\w\[({\"'])"
)


_IMPERATIVE = frozenset(
    [
        "add",
        "analyse",
        "analyze",
        "annotate",
        "build",
        "calculate",
        "change",
        "check",
        "clean",
        "compare",
        "compute",
        "convert",
        "copy",
        "count",
        "create",
        "debug",
        "delete",
        "deploy",
        "describe",
        "display",
        "document",
        "draft",
        "drop",
        "estimate",
        "evaluate",
        "explain",
        "export",
        "filter",
        "find",
        "fit",
        "fix",
        "forecast",
        "format",
        "generate",
        "get",
        "give",
        "go",
        "group",
        "help",
        "impute",
        "import",
        "increase",
        "inspect",
        "install",
        "investigate",
        "join",
        "label",
        "list",
        "load",
        "look",
        "make",
        "merge",
        "move",
        "normalise",
        "normalize",
        "open",
        "optimise",
        "optimize",
        "outline",
        "parse",
        "plot",
        "post",
        "predict",
        "prepare",
        "print",
        "produce",
        "profile",
        "read",
        "reduce",
        "refactor",
        "remove",
        "rename",
        "replace",
        "rerun",
        "retrain",
        "retry",
        "review",
        "run",
        "save",
        "scale",
        "schedule",
        "search",
        "send",
        "show",
        "sort",
        "speed",
        "split",
        "summarise",
        "summarize",
        "tell",
        "test",
        "train",
        "try",
        "update",
        "verify",
        "visualise",
        "visualize",
        "write",
        "can",
        "could",
        "would",
        "will",
        "may",
        "might",
        "shall",
    ]
)


def _imperative(sentence: str) -> bool:
    """A request ("Load sales.csv …", "Can you …") rather than a statement."""
    first = re.match(r"[A-Za-z']+", sentence)
    return first is not None and first.group(0).lower() in _IMPERATIVE


def is_request(sentence: str) -> bool:
    """A question or a request ("Load sales.csv …", "Can you …"): it asks, it states nothing."""
    return bool(_QUESTION.search(sentence)) or _imperative(_strip_filler(sentence))


def classify(sentence: str, role: str) -> str | None:
    """The kind of one sentence, or None if it is not worth remembering."""
    if _QUESTION.search(sentence) or _CODE.match(sentence):
        return None
    if _TASK.search(sentence):
        return "tasks"
    decided = _DECISION.search(sentence)
    if role == "user":
        if decided:
            return "decisions"
        if _PREFERENCE.search(sentence):
            return "preferences"
        core = _strip_filler(sentence)
        if _FACT_CUE.search(sentence) or (
            not _imperative(core)
            and (_SPECIFIC.search(core) or _COPULA.search(core))
            and len(tokens(core)) >= 3
        ):
            return "facts"  # a statement (not a request) with something specific in it
        return None
    # the assistant: only decisions stated as such and findings with something specific in them
    if _ASSISTANT_NOISE.match(sentence):
        return None
    if decided and re.search(
        r"\b(we(?:'ve)? decided|decided to|agreed|settled on|from now on)\b", sentence, _I
    ):
        return "decisions"
    if _FACT_CUE.search(sentence) and _SPECIFIC.search(sentence):
        return "facts"
    return None


def _strip_filler(sentence: str) -> str:
    text = sentence
    for _ in range(3):
        stripped = _FILLER.sub("", text, count=1)
        if stripped == text or len(stripped) < 8:
            break
        text = stripped
    return text


def clean(sentence: str) -> str:
    """The sentence as a note: filler words off the front, one line, capitalised."""
    text = one_line(_strip_filler(sentence), MAX_NOTE_CHARS)
    return text[:1].upper() + text[1:]


def extract_rules(history: Sequence[WithParts]) -> Extraction:
    """Deterministic extraction from a session's text parts (see the module docstring)."""
    found: list[tuple[str, Note]] = []
    for item in history:
        role = "user" if isinstance(item.info, UserMessage) else "assistant"
        if isinstance(item.info, AssistantMessage) and item.info.summary:
            continue  # a compaction summary restates the session: its facts are already counted
        for part in item.parts:
            if not isinstance(part, TextPart) or part.synthetic or part.ignored or not part.text:
                continue
            for sentence in sentences(part.text):
                if len(sentence) < 12 or len(tokens(sentence)) < 2:
                    continue
                kind = classify(sentence, role)
                if kind is not None:
                    found.append((kind, Note(clean(sentence), item.info.id)))
    out = empty()
    for kind, note in found:
        notes = out[kind]
        # a later note on the same subject replaces the earlier one (within the session)
        notes[:] = [n for n in notes if not supersedes(note.text, n.text)]
        notes.append(note)
    for kind in KINDS:
        out[kind] = out[kind][-MAX_PER_KIND:]
    return out


# --------------------------------------------------------------------------
# supersession: a later note on the same subject replaces an earlier one

_VALUE = re.compile(r"\d|[/\\._]")


def subject(text: str) -> set[str]:
    """The terms of a note minus its values (numbers, paths, identifiers)."""
    return {t for t in tokens(text) if not _VALUE.search(t)}


def supersedes(newer: str, older: str, threshold: float = 0.7) -> bool:
    """True when ``newer`` restates ``older``'s subject (Jaccard of subjects ≥ threshold).

    Identical notes count (the newer one is the one kept, with its date).
    """
    a, b = subject(newer), subject(older)
    if not a or not b:
        return newer.strip().lower() == older.strip().lower()
    if len(a) < 2 or len(b) < 2:
        return a == b and newer.strip().lower() == older.strip().lower()
    return len(a & b) / len(a | b) >= threshold


# --------------------------------------------------------------------------
# the LLM extractor

PROMPT = """You maintain the long-term memory of a software/data project. Read the session transcript \
and write down what a future session in the same project must know.

Answer with exactly these four Markdown sections, each a bullet list (write "- (none)" when empty):

## Decisions
## Preferences and constraints
## Facts learned
## Open tasks

Rules:
- One self-contained sentence per bullet that makes sense without the transcript; keep concrete names, \
numbers, paths, versions.
- Decisions: choices made and why. Preferences and constraints: how the user wants things done, limits, \
things never to do. Facts learned: true statements about the data, code, environment or people. \
Open tasks: work not finished yet.
- If a later message corrects an earlier one, keep only the corrected statement.
- Skip greetings, chit-chat, tool mechanics, and anything that was only tried and abandoned.
- If nothing is worth remembering, answer the four headings with "- (none)" under each."""

MAX_TRANSCRIPT_CHARS = 24_000


def transcript(history: Sequence[WithParts], limit: int = MAX_TRANSCRIPT_CHARS) -> str:
    """The session as plain text for the extractor, newest part kept when it is too long."""
    return model_transcript(history, replace(EXTRACTION, limit=limit))


def extract_llm(
    history: Sequence[WithParts], complete: Callable[[list[dict]], str]
) -> Extraction | None:
    """Ask the model for the four lists; None when its answer has none of the headings."""
    body = transcript(history)
    if not body.strip():
        return empty()
    answer = complete(
        [
            {"role": "system", "content": PROMPT},
            {
                "role": "user",
                "content": f"<transcript>\n{body}\n</transcript>\n\nWrite the four sections now.",
            },
        ]
    )
    return parse_sections(answer)


_HEADING = re.compile(r"^\s*(?:#{1,6}\s*|\*\*)(.+?)(?:\*\*)?\s*:?\s*$")
_BULLET = re.compile(r"^\s*(?:[-*+•]|\d+[.)])\s+(.*)$")
_COMMENT = re.compile(r"\s*<!--\s*(msg_\w+)?\s*-->\s*$")
_NONE = re.compile(r"^[\s(\[_*]*(?:none|n/?a|nothing|no \w+)[\s)\]_*.]*$", _I)


def kind_of_heading(heading: str) -> str | None:
    h = heading.lower()
    for kind, words in (
        ("decisions", ("decision",)),
        ("preferences", ("preference", "constraint")),
        ("facts", ("fact", "learn", "knowledge")),
        ("tasks", ("task", "todo", "to-do", "open")),
    ):
        if any(w in h for w in words):
            return kind
    return None


def parse_sections(markdown: str, *, strict: bool = True) -> Extraction | None:
    """Bullets under the four headings (any heading level, or **bold** lines).

    Bullets under other headings are ignored; ``(none)`` bullets are dropped.
    A trailing ``<!-- msg_… -->`` comment gives the note's source message.
    With ``strict``, None when none of the four headings occurs.
    """
    out = empty()
    kind: str | None = None
    seen = False
    for line in markdown.splitlines():
        bullet = _BULLET.match(line)
        heading = None if bullet else _HEADING.match(line)
        if heading:
            kind = kind_of_heading(heading.group(1))
            seen = seen or kind is not None
            continue
        if bullet and kind is not None:
            text = bullet.group(1)
            comment = _COMMENT.search(text)
            message_id = comment.group(1) if comment else None
            text = _COMMENT.sub("", text).strip()
            if text and not _NONE.match(text):
                out[kind].append(Note(one_line(text, MAX_NOTE_CHARS), message_id))
    if strict and not seen:
        return None
    return out


def render_sections(extraction: Extraction, *, ids: bool = True) -> str:
    """The four sections as Markdown (with ``<!-- msg_… -->`` source comments when ``ids``)."""
    out = []
    for kind in KINDS:
        out.append(f"## {TITLES[kind]}\n")
        notes = extraction.get(kind) or []
        for note in notes:
            source = f" <!-- {note.message_id} -->" if ids and note.message_id else ""
            out.append(f"- {note.text}{source}")
        if not notes:
            out.append("- (none)")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def notes_of(extraction: Extraction) -> Iterable[tuple[str, Note]]:
    for kind in KINDS:
        for note in extraction.get(kind, ()):
            yield kind, note
