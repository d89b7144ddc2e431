"""The built-in tools on real files, processes and a real IPython shell."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell

from jupyter_session_agent.core.errors import ToolFailure
from jupyter_session_agent.tools import (
    ToolContext,
    ToolResult,
    builtin_tools,
    openai_schema,
    run_tool,
)

TOOLS = builtin_tools()


@pytest.fixture
def ctx(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    return ToolContext("ses_test", "msg_test", "call_1", work, tmp_path / "data")


def call(name, ctx, **args) -> ToolResult:
    return run_tool(TOOLS[name], args, ctx)


# -- registry, schema, validation --------------------------------------------


def test_builtin_tools_are_exactly_the_eleven():
    assert list(TOOLS) == [
        "python",
        "bash",
        "read",
        "write",
        "edit",
        "list",
        "glob",
        "grep",
        "notebook",
        "notebook_edit",
        "notebook_run",
    ]
    for name, tool in TOOLS.items():
        schema = openai_schema(tool)
        assert schema["type"] == "function"
        assert schema["function"]["name"] == name
        assert schema["function"]["description"]
        params = schema["function"]["parameters"]
        assert params["type"] == "object"
        assert set(params["required"]) <= set(params["properties"])


def test_missing_required_argument(ctx):
    with pytest.raises(ToolFailure, match=r"^bash: missing required argument 'command'$"):
        call("bash", ctx)
    with pytest.raises(ToolFailure, match="missing required arguments 'oldString', 'newString'"):
        call("edit", ctx, filePath="x")


def test_missing_argument_names_the_unknown_ones_given(ctx):
    with pytest.raises(ToolFailure) as err:
        call("read", ctx, file_path="x.txt")
    assert str(err.value) == (
        "read: missing required argument 'filePath' (unknown arguments given: 'file_path')"
    )


def test_wrong_types_are_rejected(ctx):
    with pytest.raises(
        ToolFailure, match="read: argument 'limit' must be an integer, got string 'ten'"
    ):
        call("read", ctx, filePath="x", limit="ten")
    with pytest.raises(ToolFailure, match="argument 'command' must be a string, got array"):
        call("bash", ctx, command=["ls"])
    with pytest.raises(ToolFailure, match="must be an integer"):
        call("read", ctx, filePath="x", offset=True)  # bool is not a number
    with pytest.raises(ToolFailure, match=r"ignore\[1\]' must be a string"):
        call("list", ctx, ignore=["*.log", 3])
    with pytest.raises(ToolFailure, match="arguments must be a JSON object, got array"):
        run_tool(TOOLS["bash"], ["ls"], ctx)


def test_unknown_keys_ignored_nulls_dropped_and_light_coercion(ctx):
    seen = {}

    class Probe:
        name = "probe"
        description = "d"
        parameters = {
            "type": "object",
            "properties": {
                "n": {"type": "integer"},
                "x": {"type": "number"},
                "flag": {"type": "boolean"},
                "opt": {"type": "string"},
                "mode": {"type": "string", "enum": ["a", "b"]},
            },
            "required": ["n"],
        }

        def run(self, args, ctx):
            seen.update(args)
            return ToolResult("ok")

    run_tool(Probe(), {"n": "10", "x": "2.5", "flag": "true", "opt": None, "extra": 1}, ctx)
    assert seen == {"n": 10, "x": 2.5, "flag": True}
    run_tool(Probe(), {"n": 3.0}, ctx)
    assert seen["n"] == 3 and isinstance(seen["n"], int)
    with pytest.raises(ToolFailure, match="must be an integer, got number 3.5"):
        run_tool(Probe(), {"n": 3.5}, ctx)
    with pytest.raises(ToolFailure, match="'mode' must be one of 'a', 'b'"):
        run_tool(Probe(), {"n": 1, "mode": "c"}, ctx)


class Echo:
    name = "echo"
    description = "returns its text"
    parameters = {
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
    }

    def __init__(self, metadata=None):
        self.metadata = metadata or {}

    def run(self, args, ctx):
        return ToolResult(args["text"], title="t", metadata=self.metadata)


def test_run_tool_truncates_and_saves_the_full_output(ctx):
    text = "\n".join(str(i) for i in range(2500))
    result = run_tool(Echo({"k": 1}), {"text": text}, ctx)
    assert result.metadata["truncated"] is True and result.metadata["k"] == 1
    assert Path(result.metadata["outputPath"]).read_text() == text
    assert Path(result.metadata["outputPath"]).parent == ctx.data_dir / "tool-output"
    assert "...500 lines truncated..." in result.output and result.title == "t"


def test_run_tool_leaves_small_output_and_self_truncated_tools_alone(ctx):
    small = run_tool(Echo(), {"text": "hi"}, ctx)
    assert small.output == "hi" and small.metadata == {"truncated": False}
    big = "x\n" * 3000
    own = run_tool(Echo({"truncated": False}), {"text": big}, ctx)
    assert own.output == big
    assert not (ctx.data_dir / "tool-output").exists()


def test_exceptions_from_tools_propagate(ctx):
    class Broken(Echo):
        def __init__(self, exc):
            self.exc = exc

        def run(self, args, ctx):
            raise self.exc

    with pytest.raises(ValueError):
        run_tool(Broken(ValueError("bug")), {"text": ""}, ctx)
    with pytest.raises(KeyboardInterrupt):
        run_tool(Broken(KeyboardInterrupt()), {"text": ""}, ctx)


# -- python --------------------------------------------------------------------


@pytest.fixture
def shell_ctx(ctx):
    shell = InteractiveShell.instance()
    for name in ("tool_x", "tool_y"):
        shell.user_ns.pop(name, None)
    return ToolContext("ses_py", "msg_py", "call_py", ctx.directory, ctx.data_dir, shell=shell)


def test_python_runs_in_the_kernel_namespace(shell_ctx):
    first = call("python", shell_ctx, code="tool_x = 20\ntool_x + 1")
    assert first.output == "21" and first.metadata == {"truncated": False}
    assert shell_ctx.shell.user_ns["tool_x"] == 20
    second = call("python", shell_ctx, code="tool_y = tool_x * 2\n[tool_y, 'a']")
    assert second.output == "[40, 'a']"
    shell_ctx.shell.run_cell("tool_x = 5")  # the user's own cell changes it
    assert call("python", shell_ctx, code="tool_x").output == "5"


def test_python_result_skips_none_and_semicolon(shell_ctx):
    assert call("python", shell_ctx, code="None").output == "(no output)"
    assert call("python", shell_ctx, code="tool_x = 1").output == "(no output)"
    assert call("python", shell_ctx, code="tool_x + 1;").output == "(no output)"
    assert call("python", shell_ctx, code="def f():\n    return 3\nf()").output == "3"


def test_python_captures_stdout_and_stderr(shell_ctx):
    only_out = call("python", shell_ctx, code="print('hello')")
    assert only_out.output == "hello"
    both = call(
        "python", shell_ctx, code="import sys\nprint('out')\nprint('err', file=sys.stderr)\n7"
    )
    assert both.output == "[stdout]\nout\n[stderr]\nerr\n[result]\n7"
    # stderr alone stays labelled: the model should know it is warnings or errors.
    only_err = call("python", shell_ctx, code="import sys\nprint('careful', file=sys.stderr)")
    assert only_err.output == "[stderr]\ncareful"


def test_python_exception_is_reported_as_output(shell_ctx):
    result = call("python", shell_ctx, code="print('before')\ntool_x = 1\n\ntool_x / 0")
    assert result.metadata["error"] == "ZeroDivisionError"
    out = result.output
    assert out.startswith("[stdout]\nbefore\n[error]\nTraceback (most recent call last):")
    assert "line 4, in <module>\n    tool_x / 0" in out
    assert out.endswith("ZeroDivisionError: division by zero")
    assert "jupyter_session_agent" not in out  # our own frames are not shown
    assert shell_ctx.shell.user_ns["tool_x"] == 1  # statements before the error ran


def test_python_syntax_error_and_system_exit(shell_ctx):
    syntax = call("python", shell_ctx, code="x = (1,")
    assert syntax.metadata["error"] == "SyntaxError" and "SyntaxError" in syntax.output
    exit_ = call("python", shell_ctx, code="raise SystemExit(2)")
    assert exit_.metadata["error"] == "SystemExit"


def test_python_keyboard_interrupt_propagates(shell_ctx):
    import sys

    before = sys.stdout
    with pytest.raises(KeyboardInterrupt):
        call("python", shell_ctx, code="print('x')\nraise KeyboardInterrupt")
    assert sys.stdout is before  # capture undone on the way out


def test_python_displays_reach_the_notebook(shell_ctx, monkeypatch):
    published = []
    monkeypatch.setattr(
        shell_ctx.shell.display_pub, "publish", lambda data, *a, **k: published.append(data)
    )
    result = call(
        "python",
        shell_ctx,
        code="from IPython.display import display, HTML\ndisplay(HTML('<b>hi</b>'))",
    )
    assert result.output == "(no output)"
    assert published and published[0]["text/html"] == "<b>hi</b>"


def test_python_title_and_private_namespace(ctx):
    long = "value = " + "1 + " * 40 + "1"
    result = call("python", ctx, code=f"\n{long}\nvalue")
    assert result.output == "41" and result.title.startswith("value = 1 + ")
    assert len(result.title) == 60 and result.title.endswith("…")
    assert call("python", ctx, code="value * 2").output == "82"  # same session, no shell
    other = ToolContext("ses_other", "m", "c", ctx.directory, ctx.data_dir)
    assert call("python", other, code="'value' in dir()").output == "False"


# -- bash ------------------------------------------------------------------------


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"  # a zombie is dead, just not reaped by its new parent yet


def test_bash_output_cwd_and_exit(ctx):
    result = call("bash", ctx, command="pwd; echo oops >&2; exit 3", description="Prints cwd")
    assert result.output == f"{ctx.directory}\noops\n\n(exit code 3)"
    assert result.metadata["exit"] == 3 and result.metadata["timedOut"] is False
    assert result.title == "Prints cwd"
    ok = call("bash", ctx, command="true")
    assert ok.output == "(no output)" and ok.metadata["exit"] == 0 and ok.title == "true"


def test_bash_timeout_kills_the_group_and_keeps_partial_output(ctx):
    pidfile = ctx.directory / "sleep.pid"
    start = time.monotonic()
    result = call(
        "bash", ctx, command=f"echo started; sleep 37 & echo $! > {pidfile}; wait", timeout=300
    )
    assert time.monotonic() - start < 5
    assert result.output.startswith("started\n\n(Command timed out after 300 ms")
    assert result.metadata["timedOut"] is True
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 2
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not _alive(pid)


def test_bash_returns_when_the_shell_exits_despite_background_jobs(ctx):
    start = time.monotonic()
    result = call("bash", ctx, command="sleep 3 & echo $!")
    assert time.monotonic() - start < 2.5  # the sleep still holds the pipe open
    os.kill(int(result.output), signal.SIGKILL)


def test_bash_interrupt_kills_the_group_and_reraises(ctx):
    pidfile = ctx.directory / "sleep.pid"
    timer = threading.Timer(0.4, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            call("bash", ctx, command=f"sleep 38 & echo $! > {pidfile}; wait")
    finally:
        timer.cancel()
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 2
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not _alive(pid)


def test_bash_caps_metadata_and_checks_timeout(ctx):
    result = call("bash", ctx, command="head -c 40000 /dev/zero | tr '\\0' x")
    assert len(result.output) == 40000
    assert len(result.metadata["output"]) == 30000 + len("\n\n...")
    with pytest.raises(ToolFailure, match="timeout must be a positive"):
        call("bash", ctx, command="true", timeout=0)


# -- read / write / edit --------------------------------------------------------


def test_read_numbers_lines_and_pages(ctx):
    (ctx.directory / "a.txt").write_text("".join(f"l{i}\n" for i in range(1, 6)))
    full = call("read", ctx, filePath="a.txt")
    assert full.output == (
        "<file>\n00001| l1\n00002| l2\n00003| l3\n00004| l4\n00005| l5\n\n"
        "(End of file - total 5 lines)\n</file>"
    )
    assert full.title == "a.txt" and full.metadata["truncated"] is False
    page = call("read", ctx, filePath=str(ctx.directory / "a.txt"), offset=1, limit=2)
    assert (
        "00002| l2\n00003| l3\n\n(File has more lines. Use 'offset' parameter to read beyond line 3)"
        in page.output
    )
    assert page.metadata["truncated"] is True
    with pytest.raises(ToolFailure, match="offset 9 is past the end"):
        call("read", ctx, filePath="a.txt", offset=9)


def test_read_cuts_long_lines_and_caps_bytes(ctx):
    (ctx.directory / "long.txt").write_text("z" * 5000 + "\nshort\n")
    out = call("read", ctx, filePath="long.txt").output
    assert "00001| " + "z" * 2000 + "...\n00002| short" in out
    (ctx.directory / "wide.txt").write_text(("w" * 1000 + "\n") * 100)
    wide = call("read", ctx, filePath="wide.txt")
    assert (
        "(Output truncated at 51200 bytes. Use 'offset' parameter to read beyond line 50)"
        in wide.output
    )
    assert wide.metadata["truncated"] is True


def test_read_errors(ctx):
    (ctx.directory / "sub").mkdir()
    (ctx.directory / "blob.data").write_bytes(b"\x00\x01\x02abc")
    (ctx.directory / "notes.md").write_text("x")
    with pytest.raises(ToolFailure, match="is a directory.*list tool"):
        call("read", ctx, filePath="sub")
    with pytest.raises(ToolFailure, match="Cannot read binary file"):
        call("read", ctx, filePath="blob.data")
    with pytest.raises(ToolFailure) as err:
        call("read", ctx, filePath="notes")
    assert "File not found" in str(err.value) and "notes.md" in str(err.value)


def test_write_creates_parents_and_reports_existence(ctx):
    first = call("write", ctx, filePath="deep/er/f.txt", content="one\n")
    path = ctx.directory / "deep/er/f.txt"
    assert path.read_text() == "one\n" and first.metadata["exists"] is False
    second = call("write", ctx, filePath="deep/er/f.txt", content="two\n")
    assert path.read_text() == "two\n" and second.metadata["exists"] is True
    assert "-one\n+two" in second.metadata["diff"] and second.title == "deep/er/f.txt"


def test_edit_replaces_a_unique_match(ctx):
    path = ctx.directory / "e.py"
    path.write_text("a = 1\nb = 2\n")
    result = call("edit", ctx, filePath="e.py", oldString="b = 2", newString="b = 3")
    assert path.read_text() == "a = 1\nb = 3\n"
    assert result.output == "Edit applied successfully." and result.metadata["replacements"] == 1


def test_edit_ambiguity_not_found_and_replace_all(ctx):
    path = ctx.directory / "e.py"
    path.write_text("x = 1\nx = 1\n")
    with pytest.raises(ToolFailure, match="found 2 times.*replaceAll"):
        call("edit", ctx, filePath="e.py", oldString="x = 1", newString="x = 2")
    assert path.read_text() == "x = 1\nx = 1\n"  # untouched
    with pytest.raises(ToolFailure, match="oldString not found"):
        call("edit", ctx, filePath="e.py", oldString="y = 1", newString="y = 2")
    result = call(
        "edit", ctx, filePath="e.py", oldString="x = 1", newString="x = 2", replaceAll=True
    )
    assert path.read_text() == "x = 2\nx = 2\n" and result.metadata["replacements"] == 2
    with pytest.raises(ToolFailure, match="the same"):
        call("edit", ctx, filePath="e.py", oldString="x", newString="x")


def test_edit_tolerates_indentation_differences(ctx):
    path = ctx.directory / "f.py"
    path.write_text("def f():\n    return 1\n\nprint(f())\n")
    call("edit", ctx, filePath="f.py", oldString="return 1", newString="return 2")
    call(
        "edit",
        ctx,
        filePath="f.py",
        oldString="def f():\n  return 2",
        newString="def f():\n    return 3",
    )
    assert path.read_text() == "def f():\n    return 3\n\nprint(f())\n"


def test_edit_with_empty_old_string_creates_a_file(ctx):
    call("edit", ctx, filePath="new/n.txt", oldString="", newString="hello\n")
    assert (ctx.directory / "new/n.txt").read_text() == "hello\n"
    with pytest.raises(ToolFailure, match="already exists and is not empty"):
        call("edit", ctx, filePath="new/n.txt", oldString="", newString="bye")
    with pytest.raises(ToolFailure, match="File not found"):
        call("edit", ctx, filePath="missing.txt", oldString="a", newString="b")


# -- list / glob / grep ------------------------------------------------------------


def make_tree(root: Path) -> None:
    for rel in [
        "src/app.py",
        "src/util/helpers.py",
        "src/web/page.ts",
        "README.md",
        ".git/config",
        "node_modules/pkg/index.js",
        "src/__pycache__/app.cpython.pyc",
        ".venv/lib/site.py",
        "logs/run.log",
    ]:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"contents of {rel}\n")


def test_list_shows_a_tree_without_ignored_dirs(ctx):
    make_tree(ctx.directory)
    result = call("list", ctx, ignore=["*.log"])
    assert result.output == "\n".join(
        [
            f"{ctx.directory}/",
            "  README.md",
            "  logs/",
            "  src/",
            "    app.py",
            "    util/",
            "      helpers.py",
            "    web/",
            "      page.ts",
        ]
    )
    assert (
        call("list", ctx, path="src/util").output == f"{ctx.directory / 'src/util'}/\n  helpers.py"
    )


def test_list_caps_entries(ctx):
    for i in range(120):
        (ctx.directory / f"f{i:03d}").write_text("")
    result = call("list", ctx)
    assert result.output.count("\n  f") == 100
    assert "(Showing the first 100 entries" in result.output and result.metadata["truncated"]


def test_glob_matches_any_depth_newest_first(ctx):
    make_tree(ctx.directory)
    os.utime(ctx.directory / "src/util/helpers.py", (1e9, 1e9))  # oldest
    result = call("glob", ctx, pattern="*.py")
    assert result.output.split("\n") == [
        str(ctx.directory / "src/app.py"),
        str(ctx.directory / "src/util/helpers.py"),
    ]
    assert call("glob", ctx, pattern="src/*.{py,ts}").output == str(ctx.directory / "src/app.py")
    assert call("glob", ctx, pattern="src/**/*.ts").output == str(ctx.directory / "src/web/page.ts")
    assert call("glob", ctx, pattern="*.rs").output == "No files found"
    # Absolute or ./-prefixed patterns: literal directories become the root.
    absolute = call("glob", ctx, pattern=f"{ctx.directory}/src/*.py")
    assert absolute.output == str(ctx.directory / "src/app.py")
    assert call("glob", ctx, pattern="./*.md").output == str(ctx.directory / "README.md")
    assert call("glob", ctx, pattern="./*.py").output == "No files found"  # top level only


def test_glob_caps_results(ctx):
    for i in range(130):
        (ctx.directory / f"g{i}.txt").write_text("")
    result = call("glob", ctx, pattern="*.txt")
    assert len(result.output.split("\n\n")[0].split("\n")) == 100
    assert "showing the 100 most recent of 130 files" in result.output


def test_grep_finds_lines_with_numbers(ctx):
    make_tree(ctx.directory)
    (ctx.directory / "src/app.py").write_text("import os\n\ndef main():\n    os.getcwd()\n")
    (ctx.directory / "bin.dat").write_bytes(b"os\x00os")
    result = call("grep", ctx, pattern=r"os\.", include="*.py")
    assert (
        result.output
        == f"Found 1 matches\n\n{ctx.directory / 'src/app.py'}:\n  Line 4:     os.getcwd()"
    )
    everything = call("grep", ctx, pattern="^contents of")
    assert "node_modules" not in everything.output and ".git" not in everything.output
    assert "bin.dat" not in call("grep", ctx, pattern="os").output
    single = call("grep", ctx, pattern="main", path="src/app.py")
    assert "Line 3: def main():" in single.output
    assert call("grep", ctx, pattern="nothing-here").output == "No files found"
    with pytest.raises(ToolFailure, match="grep: invalid regular expression"):
        call("grep", ctx, pattern="(")


def test_grep_caps_matches_and_cuts_long_lines(ctx):
    (ctx.directory / "many.txt").write_text("hit\n" * 150)
    (ctx.directory / "long.txt").write_text("hit" + "q" * 3000 + "\n")
    os.utime(ctx.directory / "long.txt", (2e9, 2e9))  # newest: searched first
    result = call("grep", ctx, pattern="hit")
    assert result.output.startswith("Found 100 matches")
    assert result.output.count("  Line ") == 100
    assert f"  Line 1: hit{'q' * 1997}...\n" in result.output
    assert "(Results are truncated" in result.output and result.metadata["truncated"]
