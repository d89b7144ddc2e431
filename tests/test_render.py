"""The one rendering layer (``render/``): every part class has a Markdown, an HTML and a text
rendering; a class none of them knows is shown by a fallback, never skipped; Markdown and HTML
say the same words; the live view and the md / html exports of a stored session show each part
the same way; one transcript builder for the model-facing texts; the budget gauge's "prune due"
is the loop's own prune selection."""

from __future__ import annotations

import dataclasses
import html as stdlib_html
import re
from dataclasses import dataclass, fields
from typing import ClassVar

import pytest
from _synthetic import synthetic_session

from jupyter_session_agent.core import ids
from jupyter_session_agent.core import messages as M
from jupyter_session_agent.core.budget import ModelInfo
from jupyter_session_agent.core.compaction_config import CompactionConfig
from jupyter_session_agent.core.messages import (
    AgentPart,
    AssistantMessage,
    ModelRef,
    TextPart,
    Tokens,
    ToolCompleted,
    ToolError,
    ToolPart,
    ToolRunning,
    UnknownPart,
    UserMessage,
    WithParts,
)
from jupyter_session_agent.exchange import transfer
from jupyter_session_agent.loop.budget_report import budget_report
from jupyter_session_agent.loop.compaction.prune import prune_selection
from jupyter_session_agent.loop.compaction.transcribe import transcript as summary_input
from jupyter_session_agent.memory.extract import transcript as extraction_input
from jupyter_session_agent.render import for_model, html, markdown, plain
from jupyter_session_agent.render.forms import PART_CLASSES
from jupyter_session_agent.store import Store
from jupyter_session_agent.ui.display import TranscriptView

FORMS = {"markdown": markdown.PART, "html": html.PART, "text": plain.PART}


def part_classes_in_core() -> set[type]:
    """Every part class ``core/messages.py`` defines: a dataclass with the three ids and a
    ``type`` (found by shape, so a class added there without a rendering is found too)."""
    found = set()
    for value in vars(M).values():
        if isinstance(value, type) and dataclasses.is_dataclass(value):
            names = {f.name for f in fields(value)}
            kind = getattr(value, "type", None)
            if {"id", "session_id", "message_id"} <= names and isinstance(kind, str) and kind:
                found.add(value)  # (the base class has no type)
    return found


def every_part() -> list[M.Part | UnknownPart]:
    """The synthetic session's parts plus the variants it lacks: one or more of every class."""
    _, history = synthetic_session()
    parts: list = [p for item in history for p in item.parts]
    sid, mid = parts[0].session_id, parts[0].message_id
    parts.append(
        UnknownPart.from_data(
            {"id": ids.ascending("part"), "sessionID": sid, "messageID": mid, "type": "hologram"}
        )
    )
    parts.append(
        ToolPart(
            ids.ascending("part"),
            sid,
            mid,
            call_id="call_long",
            tool="python",
            state=ToolCompleted(
                {"code": "x = 1\n" * 100}, "ok", "python", {"error": "ZeroDivisionError"}, 1, 2
            ),
        )
    )
    return parts


def words(text: str) -> list[str]:
    """What a reader sees: tags and Markdown markup dropped, entities decoded, by word."""
    text = stdlib_html.unescape(re.sub(r"<[^>]+>", " ", text))
    text = text.replace("\u200b", "")
    return sorted(re.sub(r"[*`#]", " ", text).split())


# --------------------------------------------------------------------------
# one rendering per part class in every form


def test_every_part_class_of_core_has_a_rendering_in_every_form():
    classes = part_classes_in_core()
    assert UnknownPart in classes and len(classes) == len(M.PART_TYPES) + 1
    assert classes == set(PART_CLASSES), "a part class is not in PART_TYPES / PART_CLASSES"
    for name, form in FORMS.items():
        missing = [c.__name__ for c in classes if c not in form.table]
        assert not missing, f"the {name} form has no rendering for {missing}"


@pytest.mark.parametrize("form", FORMS)
def test_every_part_renders_in_every_form(form):
    shown: dict[type, list[str]] = {}
    for p in every_part():
        shown.setdefault(type(p), []).append(FORMS[form](p))
    assert set(shown) == set(PART_CLASSES)  # the samples hold every class
    assert all(isinstance(s, str) for texts in shown.values() for s in texts)
    # what a one-line summary leaves out (bookkeeping) is the text form's choice alone
    quiet = {M.StepStartPart} | (
        {M.ReasoningPart, M.StepFinishPart, M.SnapshotPart} if form == "text" else set()
    )
    blank = {c.__name__ for c, texts in shown.items() if not any(s.strip() for s in texts)}
    assert blank == {c.__name__ for c in quiet}, blank


def test_a_part_class_no_form_knows_is_shown_by_the_fallback():
    @dataclass(frozen=True, slots=True)
    class HologramPart(AgentPart):  # a part type added later, without renderings
        beam: str = "blue"
        type: ClassVar[str] = "hologram"

    part = HologramPart(ids.ascending("part"), "ses_x", "msg_x", name="h", beam="blue")
    for name, form in FORMS.items():
        assert type(part) not in form.table
        shown = form(part)
        assert "hologram" in shown, (name, shown)
    assert "blue" in markdown.part(part) and "blue" in html.part(part)


def test_unknown_parts_are_shown_in_every_form():
    unknown = next(p for p in every_part() if isinstance(p, UnknownPart))
    for form in FORMS.values():
        assert "hologram" in form(unknown)


def test_markdown_and_html_say_the_same_words_for_every_part():
    for part in every_part():
        assert words(markdown.part(part)) == words(html.part(part)), type(part).__name__


def test_markdown_and_html_say_the_same_words_for_every_message():
    _, history = synthetic_session()
    for item in history:
        assert words(markdown.message(item, level=3, when=True)) == words(html.message(item))


def test_html_escapes_what_a_part_holds():
    _, history = synthetic_session()
    sid, mid = history[0].info.session_id, history[0].info.id
    evil = TextPart(ids.ascending("part"), sid, mid, text="<script>alert(1)</script> **b**")
    tool = ToolPart(
        ids.ascending("part"),
        sid,
        mid,
        call_id="c",
        tool="<img src=x>",
        state=ToolError({"a": "<b>"}, "</pre><script>", 1, 2),
    )
    out = html.part(evil) + html.part(tool)
    assert "<script" not in out and "<img" not in out and "<b>b</b>" in out


# --------------------------------------------------------------------------
# the live view and the exports of the same stored session


@pytest.fixture
def stored(tmp_path):
    session, history = synthetic_session()
    store = Store(tmp_path / "data")
    store.put(session, time_created=session.time_created)
    for item in history:
        store.put(item.info, *item.parts, time_created=item.info.time_created)
    store.flush(sync=True)
    yield store, session
    store.close()


def test_the_live_view_and_the_exports_show_each_part_the_same_way(stored):
    store, session = stored
    history = store.messages(session.id)
    live = TranscriptView(history, session=session).markdown
    exported_md = transfer.export(store, session.id, "md")
    page = transfer.export(store, session.id, "html")
    shown = 0
    for item in history:
        for part in item.parts:
            md, ht = markdown.part(part), html.part(part)
            assert (md == "") == (ht == ""), type(part).__name__
            if md:
                shown += 1
                assert md in live and md in exported_md, type(part).__name__
                assert ht in page, type(part).__name__
    assert shown >= 20
    # the same message bodies: only the headers' level and time differ
    for item in history:
        body = markdown.message(item).split("\n\n", 1)[-1]
        assert body in live and body in exported_md


def test_exports_show_unknown_parts_instead_of_skipping_them(stored, tmp_path):
    store, session = stored
    item = store.messages(session.id)[-1]
    odd = UnknownPart.from_data(
        {
            "id": ids.ascending("part"),
            "sessionID": session.id,
            "messageID": item.info.id,
            "type": "hologram",
        }
    )
    store.put(odd)
    store.flush(sync=True)
    for fmt in ("md", "html"):
        assert "hologram" in transfer.export(store, session.id, fmt), fmt
    assert "hologram" in TranscriptView(store.messages(session.id)).markdown


# --------------------------------------------------------------------------
# one transcript builder for the model-facing texts


def _history() -> list[WithParts]:
    sid = ids.descending("session")
    u = UserMessage(ids.ascending("message"), sid, 1, ModelRef("openai", "m"))
    a = AssistantMessage(ids.ascending("message"), sid, u.id, 2, "openai", "m", tokens=Tokens())

    def part(cls, mid, **kw):
        return cls(ids.ascending("part"), sid, mid, **kw)

    return [
        WithParts(
            u,
            (
                part(TextPart, u.id, text="  fix the parser  "),
                part(TextPart, u.id, text="injected context", synthetic=True),
            ),
        ),
        WithParts(
            a,
            (
                part(M.ReasoningPart, a.id, text="think first"),
                part(TextPart, a.id, text="done"),
                part(
                    ToolPart,
                    a.id,
                    tool="bash",
                    call_id="c1",
                    state=ToolCompleted({"command": "ls"}, "a\nb " * 1000, "ls", {}, 1, 2),
                ),
                part(
                    ToolPart,
                    a.id,
                    tool="read",
                    call_id="c2",
                    state=ToolError({"filePath": "x"}, "File not found", 1, 2),
                ),
                part(
                    ToolPart,
                    a.id,
                    tool="grep",
                    call_id="c3",
                    state=ToolRunning({"pattern": "p"}, 1),
                ),
            ),
        ),
    ]


def test_one_transcript_builder_in_two_styles():
    history = _history()
    summary = summary_input(history, tool_chars=50)
    assert summary == for_model.model_transcript(
        history, dataclasses.replace(for_model.SUMMARY, output_chars=50)
    )
    assert summary.startswith("[User]: fix the parser\n\n[User]: injected context\n\n")
    assert "[Assistant reasoning]: think first" in summary
    assert '[Assistant tool call]: bash({"command": "ls"})\n\n[Tool result]: a\nb ' in summary
    assert "\n[truncated]" in summary and "[Tool result]: File not found" in summary
    assert "[Tool result]: [Tool execution was interrupted]" in summary

    memory = extraction_input(history)
    assert memory == for_model.model_transcript(history, for_model.EXTRACTION)
    assert memory.splitlines()[:2] == ["User: fix the parser", "Assistant: done"]
    assert "injected context" not in memory and "think first" not in memory
    (bash,) = [line for line in memory.splitlines() if line.startswith("Tool bash")]
    assert bash.startswith('Tool bash({"command": "ls"}) → a b a b') and len(bash) < 340
    assert 'Tool read({"filePath": "x"}) → error: File not found' in memory
    # the per-use limit: the first line and the newest text kept
    short = extraction_input(history * 40, limit=2_000)
    assert len(short) <= 2_000 and short.startswith("User: fix the parser")
    assert "[… earlier messages omitted …]" in short


# --------------------------------------------------------------------------
# the budget gauge's "prune due" is the loop's prune selection


def _tool_turns(outputs: list[int], compacted: int | None = None) -> list[WithParts]:
    sid = ids.descending("session")
    out: list[WithParts] = []
    for i, size in enumerate(outputs):
        u = UserMessage(ids.ascending("message"), sid, i, ModelRef("openai", "m"))
        a = AssistantMessage(ids.ascending("message"), sid, u.id, i, "openai", "m")
        state = ToolCompleted(
            {}, "x" * size, "t", {}, 1, 2, time_compacted=1 if i == compacted else None
        )
        tool = ToolPart(ids.ascending("part"), sid, a.id, call_id=f"c{i}", tool="bash", state=state)
        out += [
            WithParts(u, (TextPart(ids.ascending("part"), sid, u.id, text=f"turn {i}"),)),
            WithParts(a, (tool,)),
        ]
    return out


@pytest.mark.parametrize(
    "outputs, compacted, settings",
    [
        ([40_000] * 6, None, {}),
        ([40_000] * 6, None, {"prune": False}),
        ([40_000] * 6, None, {"prune_minimum": 500_000}),
        ([40_000] * 6, 3, {}),
        ([160_000, 10, 10], None, {}),
        ([1_000] * 30, None, {}),
        ([90_000] * 4, None, {"prune_protect": 10_000, "prune_minimum": 10_000}),
        ([90_000] * 4, None, {"protected_tools": ["bash"]}),
    ],
)
def test_the_gauge_says_prune_due_exactly_when_the_loops_prune_would_clear(
    outputs, compacted, settings
):
    model = ModelInfo("openai", "big", context=1_000_000, output=32_000)
    history = _tool_turns(outputs, compacted)
    report = budget_report(history, model, settings)
    config = CompactionConfig.from_settings(settings, model)
    parts, tokens = prune_selection(history, config, model)
    assert report.prune_due == bool(parts)
    if parts:
        assert report.prunable_tokens == tokens
