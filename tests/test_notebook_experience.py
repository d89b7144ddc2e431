"""What a data scientist meets in the notebook beside the turn itself: ``%agent sessions`` in
pages, a short ``%agent help``, titles that name the prompt, "files changed" that lists only the
agent's own changes, and plots that read in both themes with a clear empty state."""

from __future__ import annotations

import io
import threading
import time
from pathlib import Path

import pytest
from IPython.utils.capture import capture_output

from jupyter_session_agent.core.errors import UsageError
from jupyter_session_agent.session import title as T
from jupyter_session_agent.session.agent_session import AgentSession
from jupyter_session_agent.testing.scripted_server import Reply
from jupyter_session_agent.ui.commands import HELP_WIDTH
from jupyter_session_agent.ui.commands.core import SESSIONS_PAGE

# --------------------------------------------------------------------------
# %agent sessions


def test_sessions_come_in_pages_newest_first(ip, magics):
    made = [AgentSession.create(magics.settings(), store=magics.store()).info.id for _ in range(45)]
    newest_first = sorted(made)  # descending ids: the newest sorts first

    def listed(line: str) -> tuple[list[str], str]:
        text = ip.run_line_magic("agent", line).text
        return [
            row.split("`")[1] for row in text.splitlines() if row.startswith("| ") and "`" in row
        ], text

    page, text = listed("sessions")
    assert page == newest_first[:SESSIONS_PAGE]
    assert f"1–{SESSIONS_PAGE} of 45" in text and "%agent sessions 2" in text and "--all" in text
    assert listed("sessions 3")[0] == newest_first[2 * SESSIONS_PAGE :]
    assert listed("sessions --all")[0] == newest_first
    with pytest.raises(UsageError, match="3 pages"):
        ip.run_line_magic("agent", "sessions 4")
    with pytest.raises(UsageError, match="usage: %agent sessions"):
        ip.run_line_magic("agent", "sessions two")


# --------------------------------------------------------------------------
# %agent help


def test_help_is_short_and_never_breaks_a_line(ip):
    with capture_output() as out:
        ip.run_line_magic("agent", "help")
    lines = out.stdout.splitlines()
    assert all(len(line) <= HELP_WIDTH for line in lines), max(lines, key=len)
    assert "%%agent" in out.stdout and "sessions [PAGE] [--all]" in out.stdout
    assert lines[-1] == "Settings: %agent help settings"
    assert "model_overrides" not in out.stdout  # the settings are one command away
    with capture_output() as settings:
        ip.run_line_magic("agent", "help settings")
    assert "model_overrides" in settings.stdout and "%agent sessions" not in settings.stdout


def test_help_shows_every_option_of_the_cell_magic(ip):
    """The ``%%agent`` usage is generated from the magic's own arguments: an option added
    there is in the help without typing it twice."""
    from jupyter_session_agent.ui.magics import AgentMagics

    with capture_output() as out:
        ip.run_line_magic("agent", "help")
    usage = out.stdout.split("\n%agent ", 1)[0]
    options = AgentMagics.agent_cell.parser.format_usage().split()
    shown = [o.strip("[]") for o in options if o.startswith("[-") and o != "[-h]"]
    assert len(shown) >= 11 and all(o in usage for o in shown), (shown, usage)
    assert "--full" in usage and "[-p RULE]" in usage


def test_a_config_refusal_is_one_line_without_a_logging_prefix(ip):
    with capture_output() as out:
        ip.run_line_magic("config", "AgentMagics.max_steps = -3")
    shown = (out.stdout + out.stderr).strip().splitlines()
    assert len(shown) == 1 and "max_steps" in shown[0]
    assert not shown[0].startswith("ERROR:root:")


# --------------------------------------------------------------------------
# titles


@pytest.mark.parametrize(
    "prompt, title",
    [
        ("What is the capital of France?", "What is the capital of France?"),
        (
            "Load sales.csv with pandas and plot the monthly revenue per region as a bar chart.",
            "Load sales.csv with pandas and plot the monthly…",
        ),
        ("\n\n  hi   there \nsecond line", "hi there"),
        ("Summarise the notes.", "Summarise the notes"),
    ],
)
def test_a_title_from_the_prompt_is_its_first_line_cut_at_a_word(prompt, title):
    assert T.from_prompt(prompt) == title
    assert len(T.from_prompt(prompt)) <= T.TITLE_CHARS


@pytest.mark.parametrize(
    "answer, plausible",
    [
        ("Capital of France", True),
        ("Monthly revenue per region", True),
        (
            "The City of Paris is the most popular destination in France, with a population "
            "exceeding 5 million.",
            False,
        ),
        ("Paris is the capital. It is large", False),
        ("", False),
        # the request echoed back (a small model, a proxy that echoes): not a title
        ("Generate a title for this conversation:", False),
        ("(scripted) Generate a title for this conversation:", False),
        ("Title for this conversation", False),
        ("Cleaning: outliers in sales.csv", True),
    ],
)
def test_a_generated_title_must_read_as_a_title(answer, plausible):
    assert T.plausible(answer) is plausible


def test_the_embedded_model_title_is_taken_from_the_prompt_without_a_call(ip, server, magics):
    magics.titles = True
    magics.title_model = "local/smollm2-135m"  # never started: the prompt names the session
    server.enqueue(Reply(text="Paris."))
    ip.run_cell_magic("agent", "--new", "What is the capital of France? Answer in one word.")
    session = magics.session
    session.wait_title(10.0)
    assert session.info.title == "What is the capital of France? Answer in one word"
    assert len(server.requests) == 1  # the turn's only
    assert magics.store().session(session.info.id).title == session.info.title


# --------------------------------------------------------------------------
# files changed


def test_files_changed_are_the_agents_own_not_other_writes_in_the_folder(
    ip, server, store, magics, tmp_path
):
    """While the model thinks and while the tools run, another process keeps writing a log and
    a screenshot in the folder; the step's patch lists only the files the agent's write and
    edit calls changed, and a python call is credited with what changed during it."""
    (tmp_path / "notes.txt").write_text("one\n")
    stop = threading.Event()

    def other_process() -> None:
        n = 0
        while not stop.is_set():
            (tmp_path / "server.log").write_text(f"line {n}\n" * (n + 1))
            (tmp_path / "screenshot.png").write_bytes(bytes([n % 256]) * 64)
            n += 1
            time.sleep(0.005)

    writer = threading.Thread(target=other_process, daemon=True)
    server.enqueue(
        Reply(
            text="Writing the files now.",
            chunk_chars=2,
            delay=0.02,  # the model streams for a while: the other writer is busy meanwhile
            tool_calls=(
                {"name": "write", "arguments": {"filePath": "out.txt", "content": "written\n"}},
                {
                    "name": "edit",
                    "arguments": {"filePath": "notes.txt", "oldString": "one", "newString": "two"},
                },
            ),
        ),
        Reply(text="done"),
        Reply(tool_calls=({"name": "python", "arguments": {"code": "open('made.txt', 'w')"}},)),
        Reply(text="made"),
    )
    writer.start()
    try:
        ip.run_cell_magic("agent", "", "change files")
        stop.set()
        writer.join()
        ip.run_cell_magic("agent", "", "make a file in python")
    finally:
        stop.set()
        writer.join()
    history = store.messages(magics.session.info.id)
    patches = [p for m in history for p in m.parts if p.type == "patch"]
    assert [sorted(Path(f).name for f in p.files) for p in patches] == [
        ["notes.txt", "out.txt"],
        ["made.txt"],
    ]
    start = next(p for p in history[1].parts if p.type == "step-start")
    assert patches[0].hash != start.snapshot  # the other writer changed the folder meanwhile


# --------------------------------------------------------------------------
# plots


def _png_corner_alpha(fig) -> int:
    from PIL import Image

    image = Image.open(io.BytesIO(fig._repr_png_())).convert("RGBA")
    return image.getpixel((1, 1))[3]


def test_the_cost_plot_of_a_free_model_is_a_clear_empty_state(ip, server, magics):
    from jupyter_session_agent import analytics

    magics.model_overrides = {"openai/scripted": {"context": 100_000, "output": 4_096}}
    server.enqueue(Reply(text="free answer"))
    ip.run_cell_magic("agent", "", "hello")
    fig = analytics.plot_cost(magics.store())
    (ax,) = fig.axes
    assert not ax.axison  # no −0.04…0.04 USD axis
    assert any("no cost" in t.get_text() and "openai/scripted" in t.get_text() for t in ax.texts)
    assert _png_corner_alpha(fig) == 0  # no white panel in a dark theme


def test_the_context_plot_has_whole_call_ticks_and_a_legend_of_what_is_drawn(ip, server, magics):
    from jupyter_session_agent import analytics

    for i in range(3):
        server.enqueue(Reply(text=f"answer {i}"))
        ip.run_cell_magic("agent", "", f"question {i}")
    magics.session.update_info(title="A very long title " * 8)
    fig = analytics.plot_context(magics.store(), magics.session.info.id)
    (ax,) = fig.axes
    fig.canvas.draw() if hasattr(fig, "canvas") and fig.canvas else None
    ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
    assert ticks and all(float(t).is_integer() for t in ticks)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["context tokens"]  # no compaction or prune happened: not in the legend
    assert ax.get_title(loc="left").endswith("…") and len(ax.get_title(loc="left")) < 70
    assert _png_corner_alpha(fig) == 0
