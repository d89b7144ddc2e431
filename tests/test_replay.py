"""Record once, replay anywhere (docs/replay.md): ``%agent record FILE`` keeps a notebook's turns,
replay answers its ``%%agent`` cells from them with no model — in this shell against the scripted
server (which must see no request), and in fresh processes under ``pytest --nbval`` and
``jupyter nbconvert --execute`` with no key, no server and a new history."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jupyter_session_agent.core.messages import ToolPart, UserMessage
from jupyter_session_agent.session.replay import ReplayDiffers, ReplayError, load_record
from jupyter_session_agent.testing import NBVAL_SANITIZE

CAPITAL = "What is the capital of France?"
POWER = "Use python to compute 2 to the power of 10 and store it in result."
REPLIES = [
    {"text": "The capital of France is Paris.", "reasoning": "A geography question."},
    {"tool_calls": [{"name": "python", "arguments": {"code": "result = 2 ** 10\nresult"}}]},
    {"text": "result is 1024, defined in your kernel."},
]


def one_line(err: BaseException) -> str:
    (line,) = err._render_traceback_()
    assert "\n" not in line
    return line


@pytest.fixture
def recorded(ip, server, tmp_path):
    """Two turns of one session recorded against the scripted server: (record path, answers)."""
    path = tmp_path / "nb.replay.json"
    server.enqueue(*REPLIES)
    ip.run_line_magic("agent", f"record {path}")
    ip.run_cell_magic("agent", "-o first", CAPITAL)
    ip.run_cell_magic("agent", "-o second", POWER)
    answers = (ip.user_ns.pop("first"), ip.user_ns.pop("second"))
    assert ip.user_ns.pop("result") == 1024
    return path, answers


def test_record_holds_every_turn_and_the_output_names_it(recorded, magics, store):
    path, _ = recorded
    (session,) = load_record(path)
    assert session.info.id == magics.session.info.id
    assert [user.parts[0].text for user, _ in session.turns] == [CAPITAL, POWER]
    assert [len(steps) for _, steps in session.turns] == [1, 2]  # the python step, the answer


def test_replay_answers_from_the_record_and_calls_no_server(ip, magics, server, recorded, capsys):
    path, answers = recorded
    before = len(server.requests)
    capsys.readouterr()
    ip.run_line_magic("agent", f"replay {path}")
    ip.run_cell_magic("agent", "--new -o first", CAPITAL)
    ip.run_cell_magic("agent", "-o second", POWER)
    assert len(server.requests) == before  # nothing was sent
    assert (ip.user_ns["first"], ip.user_ns["second"]) == answers
    assert ip.user_ns["result"] == 1024  # the agent's python ran again, in this kernel
    out = capsys.readouterr().out
    assert "▶ replay — no model is called: turn 1 of recorded session 1 (nb.replay.json)" in out
    assert "turn 2 of recorded session 1" in out
    # the replayed turn is stored as any other, its prompt saying where the answer came from
    history = magics.session.history
    user = next(m for m in history if isinstance(m.info, UserMessage))
    (original,) = load_record(path)
    assert user.parts[0].metadata["replay"]["session"] == original.info.id
    tools = [p for m in history for p in m.parts if isinstance(p, ToolPart)]
    assert [t.state.output for t in tools] == ["1024"]


def test_an_exported_bundle_is_a_record_too(ip, magics, server, recorded, tmp_path):
    bundle = tmp_path / "one.json"
    ip.run_line_magic("agent", f"export --format json --out {bundle}")
    before = len(server.requests)
    ip.run_line_magic("agent", f"replay {bundle}")
    ip.run_cell_magic("agent", "--new -o first", CAPITAL)
    assert ip.user_ns["first"] == recorded[1][0] and len(server.requests) == before


def test_a_changed_prompt_is_one_line(ip, recorded):
    path, _ = recorded
    ip.run_line_magic("agent", f"replay {path}")
    with pytest.raises(ReplayError) as err:
        ip.run_cell_magic("agent", "--new", "What is the capital of Spain?")
    line = one_line(err.value)
    assert "this cell's prompt changed since it was recorded; re-record with" in line
    assert "What is the capital of France?" in line


def test_a_turn_missing_from_the_record_is_one_line(ip, recorded):
    path, _ = recorded
    ip.run_line_magic("agent", f"replay {path}")
    ip.run_cell_magic("agent", "--new", CAPITAL)
    ip.run_cell_magic("agent", "", POWER)
    with pytest.raises(ReplayError) as err:
        ip.run_cell_magic("agent", "", "And 2 to the power of 11?")
    assert "this cell would be turn 3 — it was not recorded" in one_line(err.value)
    with pytest.raises(ReplayError) as err:  # a second session the record does not hold
        ip.run_cell_magic("agent", "--new", CAPITAL)
    assert "not in the record nb.replay.json" in one_line(err.value)


def test_a_rerun_that_differs_is_reported_and_stored(ip, magics, server, tmp_path):
    path = tmp_path / "diff.replay.json"
    ip.user_ns["base"] = 21
    code = "doubled = base * 2\ndoubled"
    server.enqueue(
        {"tool_calls": [{"name": "python", "arguments": {"code": code}}]}, {"text": "42."}
    )
    ip.run_line_magic("agent", f"record {path}")
    ip.run_cell_magic("agent", "", "Double base into doubled.")
    ip.user_ns["base"] = 5  # the notebook changed above the agent's cell
    ip.run_line_magic("agent", f"replay {path}")
    with pytest.raises(ReplayDiffers) as err:
        ip.run_cell_magic("agent", "--new", "Double base into doubled.")
    line = one_line(err.value)
    assert "replay differs from the record: the python call" in line
    assert "gave '10', the record '42'" in line
    assert ip.user_ns["doubled"] == 10  # it ran for real; the turn finished and is stored
    assert magics.session.last_answer() == "42."


def test_tools_not_rerun_come_from_the_record(ip, magics, server, tmp_path):
    path = tmp_path / "write.replay.json"
    made = tmp_path / "notes.txt"
    server.enqueue(
        {
            "tool_calls": [
                {"name": "write", "arguments": {"filePath": str(made), "content": "hello\n"}}
            ]
        },
        {"text": "Written."},
    )
    ip.run_line_magic("agent", f"record {path}")
    ip.run_cell_magic("agent", "", "Write hello to notes.txt.")
    recorded = [
        p.state.output for m in magics.session.history for p in m.parts if isinstance(p, ToolPart)
    ]
    assert made.read_text() == "hello\n"
    made.unlink()
    magics.permission = {"*": "deny", "python": "allow"}  # nothing may write now
    ip.run_line_magic("agent", f"replay {path}")
    ip.run_cell_magic("agent", "--new", "Write hello to notes.txt.")
    assert not made.exists()  # the write was not made again
    replayed = [
        p.state.output for m in magics.session.history for p in m.parts if isinstance(p, ToolPart)
    ]
    assert replayed == recorded


def _broken_records(good: dict) -> list:
    """Variants of a good record: cut, reshaped, with ids and values the history refuses."""
    session = good["sessions"][0]
    message = session["messages"][0]
    variants: list = [
        json.dumps(good)[: len(json.dumps(good)) // 2],  # cut in the middle
        "[]",
        json.dumps({**good, "version": 99}),
        json.dumps({**good, "sessions": "/etc/passwd"}),
        json.dumps({**good, "sessions": ["/etc/passwd"]}),  # a path is not a bundle
        json.dumps({**good, "sessions": [{"info": session["info"]}]}),
    ]
    for field, value in (("id", "../../etc"), ("id", ""), ("sessionID", "ses_other"), ("id", 5)):
        bad_message = {**message, "info": {**message["info"], field: value}}
        bad = {**session, "messages": [bad_message, *session["messages"][1:]]}
        variants.append(json.dumps({**good, "sessions": [bad]}))
    for value in ("../../x", "", None, 7, "ses_" + "x" * 200):
        bad = {**session, "info": {**session["info"], "id": value}}
        variants.append(json.dumps({**good, "sessions": [bad]}))
    return variants


def test_a_broken_record_is_one_line_and_nothing_runs(ip, magics, server, recorded, tmp_path):
    from jupyter_session_agent.core.errors import AgentError

    path, _ = recorded
    variants = _broken_records(json.loads(path.read_text()))
    before = len(server.requests)
    for i, text in enumerate(variants):
        broken = tmp_path / f"broken{i}.json"
        broken.write_text(text)
        with pytest.raises(AgentError) as err:
            ip.run_line_magic("agent", f"replay {broken}")
            ip.run_cell_magic("agent", "--new", CAPITAL)
        one_line(err.value)
    assert len(server.requests) == before


def test_replay_turned_on_without_a_record_is_one_line(ip, magics):
    magics.replay = "on"
    with pytest.raises(ReplayError) as err:
        ip.run_cell_magic("agent", "--new", CAPITAL)
    assert "names no record — add %agent record FILE" in one_line(err.value)


def test_replay_command_says_the_mode_and_refuses_a_missing_record(ip, magics, tmp_path, capsys):
    with pytest.raises(ReplayError) as err:
        ip.run_line_magic("agent", f"replay {tmp_path / 'nowhere.json'}")
    assert "no record" in one_line(err.value) and magics.settings().replay == ""
    ip.run_line_magic("agent", "replay on")
    ip.run_line_magic("agent", "replay off")
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "replay is on, but no record is named yet — %agent record FILE names it",
        "replay is off: %%agent cells call the model",
    ]


# --------------------------------------------------------------------------
# a notebook recorded in a kernel, replayed in fresh processes


def _notebook(path: Path) -> None:
    import nbformat

    cells = [
        "%load_ext jupyter_session_agent",
        "%config AgentMagics.model = 'openai/scripted'\n"
        "%config AgentMagics.model_overrides = {'openai/scripted': {'context': 100000, "
        "'output': 4096, 'price_input': 1.0, 'price_output': 2.0}}\n"
        "%config AgentMagics.titles = False\n"
        "%agent permit python allow",
        "%agent record demo.replay.json",
        f"%%agent\n{CAPITAL}",
        f"%%agent\n{POWER}",
        "result",
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, path)


def _replay_env(tmp_path: Path, base_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    env.update(
        OPENAI_BASE_URL=base_url,  # a server that must see nothing
        JUPYTER_SESSION_AGENT_DIR=str(tmp_path / "fresh-history"),
        JUPYTER_SESSION_AGENT_REPLAY="on",
    )
    return env


@pytest.mark.slow
def test_a_recorded_notebook_replays_under_nbval_and_nbconvert(tmp_path):
    import nbformat

    from jupyter_session_agent.testing.record import record_notebook
    from jupyter_session_agent.testing.scripted_server import ScriptedServer

    folder = tmp_path / "nb"
    folder.mkdir()
    notebook = folder / "demo.ipynb"
    _notebook(notebook)
    nb = record_notebook(notebook, REPLIES)  # a kernel, against the scripted server
    assert (folder / "demo.replay.json").exists()
    saved = nb.cells[3].outputs[-1]
    turn = saved["metadata"]["application/vnd.jupyter.session-agent+json"]["turn"]
    assert turn["session"].startswith("ses_") and len(turn["messages"]) == 2  # prompt, answer

    with ScriptedServer() as idle:  # replay: fresh processes, no key, an empty history
        env = _replay_env(tmp_path, idle.base_url)
        nbval = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "--nbval",
                "-p",
                "jupyter_session_agent.testing.nbval_json",
                "--nbval-sanitize-with",
                str(NBVAL_SANITIZE),
                "-p",
                "no:cacheprovider",
                "-o",
                "addopts=",
                "--rootdir",
                str(folder),
                "-q",
                str(notebook),
            ],
            cwd=folder,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert nbval.returncode == 0, nbval.stdout[-4000:] + nbval.stderr[-2000:]
        assert "6 passed" in nbval.stdout
        out = folder / "executed.ipynb"
        convert = subprocess.run(
            [
                sys.executable,
                "-m",
                "jupyter",
                "nbconvert",
                "--to",
                "notebook",
                "--execute",
                "--output",
                out.name,
                str(notebook),
            ],
            cwd=folder,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert convert.returncode == 0, convert.stderr[-4000:]
        assert idle.requests == []  # replay never sent anything
    executed = nbformat.read(out, as_version=4)
    assert executed.cells[5].outputs[0]["data"]["text/plain"] == "1024"
    first = executed.cells[3].outputs[0]
    assert first["output_type"] == "stream" and first["text"].startswith("▶ replay")
    data = json.loads(json.dumps(executed.cells[3].outputs[-1]["data"]))
    texts = [
        p.get("text")
        for m in data["application/vnd.jupyter.session-agent+json"]["messages"]
        for p in m["parts"]
        if p["type"] == "text"
    ]
    assert texts == [CAPITAL, "The capital of France is Paris."]


# --------------------------------------------------------------------------
# what a review's own notebooks broke: refusals, file changes, cell numbers, a failed cell


def _tool_parts(magics) -> list:
    return [p for m in magics.session.history for p in m.parts if isinstance(p, ToolPart)]


def test_a_refusal_while_recording_stops_the_replayed_turn_too(ip, magics, server, tmp_path):
    """A call the user could not approve stopped the recorded turn after its step; the replay
    stops at the same step with the same error, instead of asking the record for another."""
    path = tmp_path / "refused.replay.json"
    magics.permission = {"bash": "ask"}  # no one can answer here: the call is refused
    server.enqueue({"tool_calls": [{"name": "bash", "arguments": {"command": "wc -l x.csv"}}]})
    ip.run_line_magic("agent", f"record {path}")
    ip.run_cell_magic("agent", "", "Count the lines of x.csv.")
    (recorded,) = _tool_parts(magics)
    assert recorded.state.metadata["permission"]["outcome"] in ("unavailable", "rejected")
    before = len(server.requests)
    ip.run_line_magic("agent", f"replay {path}")
    ip.run_cell_magic("agent", "--new", "Count the lines of x.csv.")  # no error: it matched
    (replayed,) = _tool_parts(magics)
    assert (replayed.state.error, replayed.state.metadata) == (
        recorded.state.error,
        recorded.state.metadata,
    )
    steps = [m for m in magics.session.history if not isinstance(m.info, UserMessage)]
    assert len(steps) == 1 and not steps[0].info.error
    assert len(server.requests) == before


def test_a_file_the_recorded_turn_changed_shows_in_the_replay(ip, magics, server, tmp_path):
    from jupyter_session_agent.core.messages import PatchPart

    path = tmp_path / "files.replay.json"
    magics.permission = {"edit": "allow"}
    notes = tmp_path / "notes.md"
    server.enqueue(
        {
            "tool_calls": [
                {"name": "write", "arguments": {"filePath": str(notes), "content": "x\n"}}
            ]
        },
        {"text": "Wrote notes.md."},
    )
    ip.run_line_magic("agent", f"record {path}")
    ip.run_cell_magic("agent", "", "Write notes.md.")

    def patches() -> list:
        return [
            p.files for m in magics.session.history for p in m.parts if isinstance(p, PatchPart)
        ]

    assert patches() == [(str(notes),)]
    notes.unlink()
    ip.run_line_magic("agent", f"replay {path}")
    ip.run_cell_magic("agent", "--new", "Write notes.md.")
    assert not notes.exists()  # nothing was written again
    assert patches() == [(str(notes),)]  # the transcript shows the recorded change


def test_a_failed_cell_keeps_the_later_cells_on_their_turns(ip, magics, recorded):
    path, answers = recorded
    ip.run_line_magic("agent", f"replay {path}")
    with pytest.raises(ReplayError) as err:
        ip.run_cell_magic("agent", "--new", "What is the capital of Spain?")
    line = one_line(err.value)
    assert (
        "it differs at character 24: recorded 'What is the capital of France?', this cell "
        "'What is the capital of Spain?'" in line
    )
    ip.run_cell_magic("agent", "-o second", POWER)  # still turn 2, not turn 1 again
    assert ip.user_ns["second"] == answers[1]


def test_fix_replays_when_the_runner_numbers_cells_otherwise(ip, magics, server, tmp_path):
    """``%agent fix`` names the cell's number, which another runner (nbval) gives otherwise:
    the replay matches it and stores the recorded words."""
    path = tmp_path / "fix.replay.json"
    server.enqueue({"text": "You divided by zero."})
    ip.run_line_magic("agent", f"record {path}")
    ip.run_cell("1/0", store_history=True)
    ip.run_line_magic("agent", "fix")
    (recorded,) = load_record(path)
    words = recorded.turns[0][0].parts[0].text
    assert "In [" in words
    ip.run_line_magic("agent", f"replay {path}")
    for _ in range(3):  # the runner's cell numbers move on
        ip.run_cell("pass", store_history=True)
    ip.run_cell("1/0", store_history=True)
    magics.session = None
    ip.run_line_magic("agent", "fix")
    prompt = next(m for m in magics.session.history if isinstance(m.info, UserMessage))
    assert prompt.parts[0].text == words and magics.session.last_answer() == "You divided by zero."


def test_the_same_call_id_in_two_steps_replays_each_steps_result(ip, magics, server, tmp_path):
    """Some servers number tool calls per response (call_0 in every step): each replayed call
    takes its own step's recorded result."""
    path = tmp_path / "ids.replay.json"
    server.enqueue(
        {"tool_calls": [{"id": "call_0", "name": "python", "arguments": {"code": "a = 1\na"}}]},
        {"tool_calls": [{"id": "call_0", "name": "python", "arguments": {"code": "b = 2\nb"}}]},
        {"text": "a=1, b=2."},
    )
    ip.run_line_magic("agent", f"record {path}")
    ip.run_cell_magic("agent", "", "Make a and b.")
    ip.run_line_magic("agent", f"replay {path}")
    ip.run_cell_magic("agent", "--new", "Make a and b.")  # no ReplayDiffers
    assert [p.state.output for p in _tool_parts(magics)] == ["1", "2"]


def _sanitized(value) -> str:
    """``value`` as nbval compares it with the shipped sanitizer and the JSON plugin."""
    from nbval.plugin import get_sanitize_patterns

    text = json.dumps(value, sort_keys=True, indent=1, ensure_ascii=False)
    for pattern, replacement in get_sanitize_patterns(NBVAL_SANITIZE.read_text()):
        text = __import__("re").sub(pattern, replacement, text)
    return text


def test_the_sanitizer_hides_only_what_a_run_changes():
    """Two transcripts that differ only in ids, times, tree hashes compare equal; any change
    to what the agent said or did, its files, tokens or cost, does not."""
    patch = {
        "files": ["/work/nb/notes.md"],
        "hash": "a1e03bdb9a8302482863d22e9e208d64bfb53e17",
        "id": "prt_db4541963ffexb6JmAbCdEfGhI",
        "messageID": "msg_db4541963ffexb6JmAbCdEfGhI",
        "sessionID": "ses_db4541963ffexb6JmAbCdEfGhI",
        "type": "patch",
    }
    tool = {
        "state": {"input": {"code": "x = 1", "hash": "0" * 40}, "time": {"start": 1765000000000}},
        "tool": "python",
        "type": "tool",
    }
    base = {"parts": [patch, tool], "tokens": 120, "cost": 0.0015}
    other_run = json.loads(json.dumps(base))
    other_run["parts"][0].update(hash="2d645b3d5237e647879bd11f59118289e324b7cc")
    other_run["parts"][0].update(id="prt_00000000000000000000000000")
    other_run["parts"][1]["state"]["time"]["start"] = 1765999999999
    assert _sanitized(base) == _sanitized(other_run)
    changes = []
    for edit in (
        lambda v: v["parts"][0].update(files=["/work/nb/other.md"]),
        lambda v: v["parts"][1]["state"]["input"].update(code="x = 2"),
        lambda v: v["parts"][1]["state"]["input"].update(hash="1" * 40),  # not a patch's hash
        lambda v: v.update(tokens=121),
        lambda v: v.update(cost=0.0016),
    ):
        changed = json.loads(json.dumps(base))
        edit(changed)
        changes.append(_sanitized(changed) != _sanitized(base))
    assert changes == [True] * 5


def _reordered(good: dict) -> dict:
    """The record with its session's two turns swapped."""
    messages = good["sessions"][0]["messages"]
    starts = [i for i, m in enumerate(messages) if m["info"]["role"] == "user"]
    first, second = messages[: starts[1]], messages[starts[1] :]
    session = {**good["sessions"][0], "messages": second + first}
    return {**good, "sessions": [session]}


def _edited(good: dict) -> dict:
    data = json.loads(json.dumps(good))
    for part in data["sessions"][0]["messages"][0]["parts"]:
        if part["type"] == "text":
            part["text"] = part["text"].replace("France", "Italy")
    return data


OTHER_NOTEBOOK = Path(__file__).parent.parent / "notebooks" / "05_replay.replay.json"


@pytest.mark.parametrize(
    "variant, expected",
    [
        (_reordered, "prompt changed since it was recorded"),
        (_edited, "differs at character 24: recorded 'What is the capital of Italy?'"),
        (lambda good: {**good, "sessions": []}, "is not in the record"),
        (lambda good: json.loads(OTHER_NOTEBOOK.read_text()), "prompt changed since it was"),
        (lambda good: {**good, "sessions": good["sessions"] * 2}, None),  # an unused extra
    ],
    ids=["reordered-turns", "edited-prompt", "no-session", "another-notebook", "extra-session"],
)
def test_a_record_that_does_not_fit_the_notebook_is_one_line(
    ip, magics, server, recorded, tmp_path, variant, expected
):
    path, answers = recorded
    other = tmp_path / "other.replay.json"
    other.write_text(json.dumps(variant(json.loads(path.read_text()))))
    before = len(server.requests)
    ip.run_line_magic("agent", f"replay {other}")
    if expected is None:
        ip.run_cell_magic("agent", "--new -o first", CAPITAL)
        assert ip.user_ns["first"] == answers[0]
    else:
        with pytest.raises(ReplayError) as err:
            ip.run_cell_magic("agent", "--new", CAPITAL)
        assert expected in one_line(err.value)
    assert len(server.requests) == before


# a data scientist's notebook: a DataFrame made by the agent, a {var} prompt, -o, -c, parallel
# calls, a refused call, %agent fix, a file written, a second session, a turn that compacts;
# the replies stand in for a model's
ANALYSIS_CELLS = [
    "%load_ext jupyter_session_agent",
    "%config AgentMagics.model = 'openai/scripted'\n"
    "%config AgentMagics.model_overrides = {'openai/scripted': {'context': 100000, "
    "'output': 4096, 'price_input': 1.0, 'price_output': 2.0}}\n"
    "%config AgentMagics.titles = False\n"
    "%config AgentMagics.permission = {'python': 'allow', 'edit': 'allow', 'bash': 'ask'}",
    "%agent record analysis.replay.json",
    "%%agent\nLoad a small sales table into `sales` with columns region and amount.",
    "n = len(sales)\nn",
    "%%agent -o summary\nThe table has {n} rows. Compute the totals per region into `totals` "
    "and the shape, at once.",
    "print(summary)\ntotals",
    "%%agent -c\nGive me code to plot totals.",
    "1/0",
    "%agent fix",
    "%%agent\nCount the lines of sales.csv with wc.",
    "%%agent --new\nWrite a short notes.md about the sales data.",
    "%%agent\nCompute the grand total into `grand` and then the mean into `avg`.",
    "grand, avg",
]
ANALYSIS_REPLIES = [
    {
        "tool_calls": [
            {
                "name": "python",
                "arguments": {
                    "code": "import pandas as pd\nsales = pd.DataFrame({'region': ['north', "
                    "'south', 'north', 'east'], 'amount': [120.5, 80.0, 99.5, 42.0]})\nsales"
                },
            }
        ]
    },
    {"text": "I loaded `sales` (4 rows)."},
    {
        "tool_calls": [
            {
                "name": "python",
                "arguments": {"code": "totals = sales.groupby('region').amount.sum()\ntotals"},
            },
            {"name": "python", "arguments": {"code": "sales.shape"}},
        ]
    },
    {"text": "Totals: north 220.0, south 80.0, east 42.0; shape (4, 2)."},
    {"text": "Here you go:\n\n```python\ntotals.plot.bar()\n```"},
    {"text": "You divided by zero. Use a non-zero divisor."},
    {"tool_calls": [{"name": "bash", "arguments": {"command": "wc -l sales.csv"}}]},
    {
        "tool_calls": [
            {"name": "write", "arguments": {"filePath": "notes.md", "content": "# Notes\n"}}
        ]
    },
    {"text": "Wrote notes.md."},
    {"tool_calls": [{"name": "python", "arguments": {"code": "grand = sales.amount.sum()"}}]},
    {  # this step fills the context: a compaction follows it, then the answer
        "tool_calls": [{"name": "python", "arguments": {"code": "avg = sales.amount.mean()"}}],
        "usage": {"prompt_tokens": 97000, "completion_tokens": 20, "total_tokens": 97020},
    },
    {"text": "## Goal\nSales totals.\n## Accomplished\ngrand and avg."},
    {"text": "grand is 342.0 and avg is 85.5."},
]


@pytest.mark.slow
def test_an_analysis_notebook_replays_under_nbval_and_nothing_connects(tmp_path):
    import socket
    import threading

    import nbformat

    from jupyter_session_agent.testing.record import record_notebook

    folder = tmp_path / "analysis"
    folder.mkdir()
    notebook = folder / "analysis.ipynb"
    cells = [nbformat.v4.new_code_cell(c) for c in ANALYSIS_CELLS]
    cells[8].metadata["tags"] = ["raises-exception"]
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, notebook)
    record_notebook(notebook, ANALYSIS_REPLIES)  # every reply used, no cell failed
    (folder / "notes.md").unlink()

    listener = socket.create_server(("127.0.0.1", 0))  # takes any connection, answers nothing
    connections: list = []
    threading.Thread(
        target=lambda: connections.append(listener.accept()), daemon=True, name="nowhere"
    ).start()
    env = _replay_env(tmp_path, f"http://127.0.0.1:{listener.getsockname()[1]}/v1")
    try:
        nbval = subprocess.run(
            [
                *(sys.executable, "-m", "pytest", "--nbval", "-p", "no:cacheprovider"),
                *("-p", "jupyter_session_agent.testing.nbval_json"),
                *("--nbval-sanitize-with", str(NBVAL_SANITIZE), "-o", "addopts="),
                *("--rootdir", str(folder), "-q", str(notebook)),
            ],
            cwd=folder,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        listener.close()
    assert nbval.returncode == 0, nbval.stdout[-6000:] + nbval.stderr[-2000:]
    assert f"{len(ANALYSIS_CELLS)} passed" in nbval.stdout
    assert connections == []  # replay opened no connection to the model's address
    assert not (folder / "notes.md").exists()  # the recorded write was not made again


def test_a_compaction_while_recording_is_replayed_as_recorded(ip, magics, server, tmp_path):
    """The recorded compaction's request, summary and continuation come back after the same
    step (new ids, the tail reference mapped), so the transcript and budget are the recorded
    ones; nothing is summarised or sent."""
    from jupyter_session_agent.core.messages import CompactionPart

    path = tmp_path / "compacted.replay.json"
    magics.model_overrides = {"openai/scripted": {"context": 100000, "output": 4096}}
    full = {"prompt_tokens": 97000, "completion_tokens": 20, "total_tokens": 97020}
    server.enqueue(
        {"text": "Hello."},
        {"tool_calls": [{"name": "python", "arguments": {"code": "g = 1"}}], "usage": full},
        {"text": "## Goal\nA summary."},
        {"text": "Done."},
    )
    ip.run_line_magic("agent", f"record {path}")
    ip.run_cell_magic("agent", "", "Hello.")
    ip.run_cell_magic("agent", "", "Make g.")

    def shape(history) -> list:
        return [
            (type(m.info).__name__, getattr(m.info, "summary", None), [p.type for p in m.parts])
            for m in history
        ]

    recorded_history = list(magics.session.history)
    assert any(isinstance(p, CompactionPart) for m in recorded_history for p in m.parts)
    recorded_budget = magics.session.budget_report()
    before = len(server.requests)
    ip.run_line_magic("agent", f"replay {path}")
    ip.run_cell_magic("agent", "--new", "Hello.")
    ip.run_cell_magic("agent", "", "Make g.")
    replayed = magics.session.history
    assert len(server.requests) == before
    assert shape(replayed) == shape(recorded_history)
    assert [p.text for m in replayed for p in m.parts if p.type == "text"] == [
        p.text for m in recorded_history for p in m.parts if p.type == "text"
    ]
    (request,) = [p for m in replayed for p in m.parts if isinstance(p, CompactionPart)]
    assert request.tail_start_id in {m.info.id for m in replayed}  # this replay's message
    assert request.tail_start_id not in {m.info.id for m in recorded_history}
    budget = magics.session.budget_report()
    assert (budget.compactions, budget.summaries, budget.used) == (
        recorded_budget.compactions,
        recorded_budget.summaries,
        recorded_budget.used,
    )


def test_a_rerun_that_differs_only_in_object_addresses_shows_the_recorded_output(
    ip, magics, server, tmp_path
):
    path = tmp_path / "address.replay.json"
    code = "def area(r):\n    return 3.14 * r * r\narea"
    server.enqueue(
        {"tool_calls": [{"name": "python", "arguments": {"code": code}}]}, {"text": "Defined."}
    )
    ip.run_line_magic("agent", f"record {path}")
    ip.run_cell_magic("agent", "", "Define area.")
    (recorded,) = _tool_parts(magics)
    assert " at 0x" in recorded.state.output
    ip.run_line_magic("agent", f"replay {path}")
    ip.run_cell_magic("agent", "--new", "Define area.")  # a new function, a new address
    (replayed,) = _tool_parts(magics)
    assert replayed.state.output == recorded.state.output
    assert ip.user_ns["area"](1) == 3.14


def test_the_end_of_loop_prune_clears_what_it_cleared_when_recording(ip, magics, server, tmp_path):
    path = tmp_path / "pruned.replay.json"
    magics.compaction = {"prune_protect": 200, "prune_minimum": 100}
    code = "x = 'a' * 3000\nprint(x)"
    for answer in ("one", "two", "three"):
        server.enqueue(
            {"tool_calls": [{"name": "python", "arguments": {"code": code}}]}, {"text": answer}
        )
    ip.run_line_magic("agent", f"record {path}")
    for prompt in ("a", "b", "c"):
        ip.run_cell_magic("agent", "", prompt)

    def pruned() -> list:
        return [bool(p.state.time_compacted) for p in _tool_parts(magics)]

    recorded, recorded_budget = pruned(), magics.session.budget_report()
    assert recorded == [True, False, False]
    ip.run_line_magic("agent", f"replay {path}")
    ip.run_cell_magic("agent", "--new", "a")
    for prompt in ("b", "c"):
        ip.run_cell_magic("agent", "", prompt)
    budget = magics.session.budget_report()
    assert pruned() == recorded
    assert (budget.pruned_parts, budget.tool_output_tokens) == (
        recorded_budget.pruned_parts,
        recorded_budget.tool_output_tokens,
    )
