"""Code actions (``codeaction.py``): the model writes ```python blocks, each becomes a python
tool call with the same part, permission check, output and history as a native call.

End to end through a real IPython shell and the scripted server over HTTP, with code actions
enabled for the scripted model by the setting (the kernel-side translation); the embedded
server's own translation is tested against the real llama.cpp server in
``tests/test_local_code.py``."""

from __future__ import annotations

import json
import os
import time

import pytest

from jupyter_session_agent.core import codeaction
from jupyter_session_agent.core.chat import MAX_STEPS_TEXT
from jupyter_session_agent.core.codeaction import BlockParser, code_messages, enabled
from jupyter_session_agent.providers.codeactions import CodeActionProvider
from jupyter_session_agent.session.approval import ScriptedApprover
from jupyter_session_agent.testing.scripted_server import Reply
from jupyter_session_agent.tools import kernel


@pytest.fixture
def cip(ip, magics):
    """The shell with code actions on for the scripted model."""
    magics.code_actions = ["openai/*"]
    yield ip
    for name in ("y", "z", "w", "never", "cut", "shown"):
        ip.user_ns.pop(name, None)


def chat_requests(server):
    return [r for r in server.requests if r.get("messages")]


def parts_of(store, session_id):
    """The assistant's parts, in order."""
    return [p for m in store.messages(session_id) if m.info.role == "assistant" for p in m.parts]


def tools_of(store, session_id):
    return [p for p in parts_of(store, session_id) if p.type == "tool"]


def test_a_python_block_is_a_python_call_and_its_output_goes_back_as_text(
    cip, server, magics, store
):
    server.enqueue(
        Reply(text="Let me compute.\n```python\ny = 6 * 7\ny\n```\n"), Reply(text="y is 42.")
    )
    cip.run_cell_magic("agent", "-o answer", "set y to 6 times 7")
    assert cip.user_ns["y"] == 42 and cip.user_ns["answer"] == "y is 42."
    session = magics.session.info.id
    (tool,) = tools_of(store, session)
    assert tool.tool == "python" and tool.state.status == "completed"
    assert tool.state.input == {"code": "y = 6 * 7\ny"} and tool.state.output == "42"
    texts = [p.text for p in parts_of(store, session) if p.type == "text"]
    assert texts == ["Let me compute.", "y is 42."]  # the block is the call, not text
    first, second = chat_requests(server)
    assert "tools" not in first and "tools" not in second  # no JSON tool calling at all
    assert first["temperature"] == 0
    sent = second["messages"]
    assert sent[0]["role"] == "system" and sent[0]["content"].startswith(codeaction.PROMPT)
    example_turns = 4 * codeaction.SHOWN
    assert [m["role"] for m in sent[1 : 1 + example_turns]] == ["user", "assistant"] * (
        example_turns // 2
    )
    assert sent[-2] == {
        "role": "assistant",
        "content": "Let me compute.\n```python\ny = 6 * 7\ny\n```",
    }
    assert sent[-1] == {"role": "user", "content": "Output:\n42"}


def test_the_call_starts_while_the_block_streams(server, magics, cip):
    """The tool part appears when the fence opens, before the code has finished streaming."""
    code = "\n".join(f"v{i} = {i}" for i in range(30))
    server.enqueue(
        Reply(text=f"```python\n{code}\n```\n", chunk_chars=4, delay=0.02), Reply(text="done")
    )
    provider = magics.current().provider("openai/scripted")[0]
    wrapped = CodeActionProvider(provider, server_side=False)
    from jupyter_session_agent.providers.openai_provider import ChatRequest

    tool = [{"type": "function", "function": {"name": "python", "parameters": {}}}]
    seen = []
    for event in wrapped.stream(
        ChatRequest(model="scripted", messages=[{"role": "user", "content": "go"}], tools=tool)
    ):
        seen.append((type(event).__name__, time.monotonic()))
    names = [n for n, _ in seen]
    assert names == ["ToolInputStart", "ToolCall", "Finish"]
    started, called = seen[0][1], seen[1][1]
    assert called - started > 0.5  # ~60 chunks of code came between the two


def test_only_the_first_block_runs_and_other_languages_stay_text(cip, server, magics, store):
    """A reply's first python block is the step's one call (as on the embedded server): the
    model reads its output before it writes more. What the reply says after it is dropped, so
    a reply of a hundred blocks is one call, not a hundred."""
    reply = (
        "First:\n```bash\necho never > never.txt\n```\nthen\n```python\ny = 1\n```\n"
        "and\n```py\nz = y + 1\nz\n```\n"
        + "".join(f"```python\nn{i} = {i}\n```\n" for i in range(100))
    )
    server.enqueue(Reply(text=reply), Reply(text="y is 1."))
    cip.run_cell_magic("agent", "", "two blocks")
    assert cip.user_ns["y"] == 1 and "z" not in cip.user_ns and "n5" not in cip.user_ns
    session = magics.session.info.id
    tools = tools_of(store, session)
    assert [t.state.input["code"] for t in tools] == ["y = 1"]
    assert [t.state.status for t in tools] == ["completed"]
    texts = [p.text for p in parts_of(store, session) if p.type == "text"]
    assert "```bash\necho never > never.txt\n```" in texts[0]
    assert not any("z = y + 1" in t for t in texts)
    kinds = [p.type for p in store.messages(session)[1].parts if p.type in ("text", "tool")]
    assert kinds == ["text", "tool"]
    assert not os.path.exists(os.path.join(magics.session.info.directory, "never.txt"))


def test_an_unclosed_block_runs_when_the_model_ended_it(cip, server, magics, store):
    server.enqueue(Reply(text="```python\nw = 'open'\n"), Reply(text="ok"))
    cip.run_cell_magic("agent", "", "unclosed")
    assert cip.user_ns["w"] == "open"
    (tool,) = tools_of(store, magics.session.info.id)
    assert tool.state.status == "completed"


def test_a_block_cut_by_the_output_limit_does_not_run(cip, server, magics, store):
    server.enqueue(
        Reply(text="```python\ncut = [1, 2,", finish_reason="length"), Reply(text="too long")
    )
    cip.run_cell_magic("agent", "", "cut")
    assert "cut" not in cip.user_ns
    (tool,) = tools_of(store, magics.session.info.id)
    assert tool.state.status == "error" and codeaction.CUT_TEXT in tool.state.error
    resent = chat_requests(server)[1]["messages"][-1]
    assert resent == {"role": "user", "content": "Error: " + codeaction.CUT_TEXT}


def test_a_plain_answer_ends_the_turn(cip, server, magics, store):
    server.enqueue(Reply(text="The capital of France is Paris."))
    cip.run_cell_magic("agent", "-o answer", "capital of France?")
    assert cip.user_ns["answer"] == "The capital of France is Paris."
    assert len(chat_requests(server)) == 1
    messages = store.messages(magics.session.info.id)
    assert messages[-1].info.finish == "stop" and not tools_of(store, magics.session.info.id)


def test_an_error_goes_back_as_its_last_line(cip, server, magics, store):
    server.enqueue(
        Reply(text="```python\nundefined_name + 1\n```"),
        Reply(text="```python\n1 + 1\n```"),
        Reply(text="2"),
    )
    cip.run_cell_magic("agent", "", "retry")
    retry = chat_requests(server)[1]["messages"][-1]
    assert retry == {
        "role": "user",
        "content": "Error: NameError: name 'undefined_name' is not defined",
    }
    tools = tools_of(store, magics.session.info.id)
    assert [t.state.status for t in tools] == ["completed", "completed"]  # a raising cell completes
    assert "NameError" in tools[0].state.output  # the history keeps the whole traceback


def test_the_max_steps_step_runs_no_code(cip, server, magics, store):
    magics.max_steps = 2
    server.enqueue(Reply(text="```python\ny = 1\n```"), Reply(text="```python\nnever = 1\n```"))
    cip.run_cell_magic("agent", "", "loop")
    assert cip.user_ns["y"] == 1 and "never" not in cip.user_ns
    session = magics.session.info.id
    assert len(tools_of(store, session)) == 1
    last = chat_requests(server)[-1]
    assert "tools" not in last
    assert last["messages"][-1]["role"] == "user"  # the instruction, as the small model reads it
    assert MAX_STEPS_TEXT not in json.dumps(last["messages"][-1])
    final = store.messages(session)[-1]
    assert "```python\nnever = 1\n```" in "".join(p.text for p in final.parts if p.type == "text")


def test_approval_applies_to_code_blocks(cip, server, magics, store):
    magics.permission = {"python": "ask"}
    session = magics.current(new=True)
    session.approver = ScriptedApprover(["r"])
    server.enqueue(Reply(text="```python\nnever = 1\n```"))
    cip.run_cell_magic("agent", "", "rejected")
    assert "never" not in cip.user_ns
    (request,) = session.approver.asked
    assert request.permission == "python" and "never = 1" in json.dumps(
        dict(request.metadata), default=str
    )
    (tool,) = tools_of(store, session.info.id)
    assert tool.state.status == "error" and tool.state.input == {"code": "never = 1"}
    assert len(chat_requests(server)) == 1  # a rejection stops the turn

    session.approver = ScriptedApprover(["a"])
    server.enqueue(
        Reply(text="```python\nshown = 1\n```"),
        Reply(text="```python\nshown = 2\n```"),
        Reply(text="done"),
    )
    cip.run_cell_magic("agent", "", "always")
    assert cip.user_ns["shown"] == 2 and len(session.approver.asked) == 1  # "always" covers the 2nd
    assert store.session(session.info.id).permission == (
        {"permission": "python", "pattern": "*", "action": "allow"},
    )


def test_a_denied_python_tool_leaves_blocks_as_text(cip, server, magics, store):
    magics.permission = {"python": "deny"}
    server.enqueue(Reply(text="```python\nnever = 1\n```"))
    cip.run_cell_magic("agent", "", "denied")
    assert "never" not in cip.user_ns and not tools_of(store, magics.session.info.id)
    assert len(chat_requests(server)) == 1


def test_other_models_keep_native_tool_calls(ip, server, magics, store):
    assert magics.code_actions == "auto"  # the embedded model only
    server.enqueue(
        Reply(tool_calls=({"name": "python", "arguments": {"code": "y = 5"}},)), Reply(text="5")
    )
    ip.run_cell_magic("agent", "", "native")
    assert ip.user_ns.pop("y") == 5
    assert "tools" in chat_requests(server)[0]


def test_the_setting_is_checked_when_assigned(magics):
    from jupyter_session_agent.core.errors import ConfigError

    with pytest.raises(ConfigError) as info:
        magics.code_actions = "sometimes"
    assert "\n" not in str(info.value) and "provider/model" in str(info.value)
    magics.code_actions = ["ollama/*"]
    assert magics.settings().code_actions == ["ollama/*"]


def test_which_models_use_code_actions():
    assert enabled("auto", "local", "smollm2") and not enabled("auto", "openai", "gpt-4o-mini")
    assert enabled("on", "openai", "gpt-4o") and enabled(True, "x", "y")
    assert not enabled("off", "local", "smollm2") and not enabled(False, "local", "smollm2")
    assert enabled(["ollama/*"], "ollama", "llama3.2") and not enabled(
        ["ollama/*"], "local", "smollm2"
    )


# -- the parser and the text protocol (pure) -----------------------------------------------


def parse(text: str, size: int, cut: bool = False) -> list[tuple[str, str]]:
    parser, events = BlockParser(), []
    for i in range(0, len(text), size):
        events += parser.feed(text[i : i + size])
    events += parser.end(cut)
    merged: list[tuple[str, str]] = []
    for kind, piece in events:
        if merged and kind == merged[-1][0] and kind in ("text", "code"):
            merged[-1] = (kind, merged[-1][1] + piece)
        else:
            merged.append((kind, piece))
    return merged


@pytest.mark.parametrize("size", [1, 2, 3, 7, 1000])
def test_the_parser_gives_the_same_events_however_the_text_is_split(size):
    text = (
        "Sure:\n```python\nfor i in range(3):\n    print(i)\n```\nAn inline ``` fence and `code`.\n"
        "```text\n```python\nnot code\n```\n   ```PY\nx = 1\n   ```\nend"
    )
    assert parse(text, size) == [
        ("text", "Sure:\n"),
        ("open", ""),
        ("code", "for i in range(3):\n    print(i)"),
        ("close", "for i in range(3):\n    print(i)"),
        ("text", "An inline ``` fence and `code`.\n```text\n```python\nnot code\n```\n"),
        ("open", ""),
        ("code", "x = 1"),
        ("close", "x = 1"),
        ("text", "end"),
    ]


def test_the_parser_ends_an_open_block():
    assert parse("```python\nx = 1", 3) == [("open", ""), ("code", "x = 1"), ("close", "x = 1")]
    assert parse("```python\nx = [1,", 3, cut=True) == [
        ("open", ""),
        ("code", "x = [1,"),
        ("cut", "x = [1,"),
    ]
    assert parse("```python\nx = 1\n```", 5) == [
        ("open", ""),
        ("code", "x = 1"),
        ("close", "x = 1"),
    ]
    assert parse("````python\nx\n````", 4)[0][0] == "text"  # four backticks: not our fence
    assert parse("```\nbare\n```", 2) == [("text", "```\nbare\n```")]


def test_code_messages_render_calls_results_and_the_max_steps_note():
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "python", "arguments": '{"code": "1/0"}'},
    }
    messages = [
        {"role": "system", "content": "SYS"},
        {"role": "user", "content": "divide"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {
            "role": "tool",
            "tool_call_id": "c1",
            "content": 'Traceback (most recent call last):\n  File "<python-tool c1>", line 1\nZeroDivisionError: '
            "division by zero",
        },
        {"role": "assistant", "content": MAX_STEPS_TEXT},
    ]
    out = code_messages(messages)
    assert out[0] == {"role": "system", "content": "SYS"}
    assert out[-3:] == [
        {"role": "user", "content": "divide"},
        {"role": "assistant", "content": "```python\n1/0\n```"},
        {
            "role": "user",
            "content": "Error: ZeroDivisionError: division by zero\n\n"
            "Stop running code now: answer in one short sentence.",
        },
    ]
    assert not codeaction.offers_python(
        [{"type": "function", "function": {"name": "python"}}], messages
    )


def test_the_system_prompt_names_the_users_variables():
    import pandas as pd

    def double(n):
        return 2 * n

    frame = pd.DataFrame({"name": ["a", "b"], "age": [1, None], "price": ["$1,200", "$3"]})
    namespace = {"df": frame, "x": 42, "double": double, "_hidden": 1, "json": json, "In": []}
    text = codeaction.system_prompt(kernel.variables_line(namespace, {"In": namespace["In"]}))
    assert text.startswith(codeaction.PROMPT)
    text_dtype = str(frame["name"].dtype)  # "object", or "str" with pandas 3
    assert (
        text.endswith(  # the columns as df.info() and df.head(1) show them; a function's parameters
            f"Variables in the kernel: df (DataFrame, 2 × 3, columns name: {text_dtype} e.g. 'a', "
            f"age: float64 with 1 missing, price: {text_dtype} of numbers e.g. '$1,200'), "
            "x (int, 42); "
            "also double(n)."
        )
    )
    messages = [{"role": "system", "content": text}]
    assert codeaction.known_names(messages) == {"df", "x", "double"}
    assert {"name", "age", "price"} <= codeaction.kernel_words(messages)
    assert codeaction.system_prompt(kernel.variables_line({})) == codeaction.PROMPT


def test_the_code_starts_below_what_the_kernel_holds_about_the_request(tmp_path):
    import pandas as pd

    def scale(value, factor):
        return value * factor

    (tmp_path / "sales.csv").write_text("a,b\n1,2\n")
    (tmp_path / ".secret").write_text("x")
    namespace = {
        "sales": pd.DataFrame({"region": ["n"], "units": [3]}),
        "people": pd.DataFrame({"name": ["Bo"], "average": [1.0]}),
        "words": ["a"],
        "scale": scale,
        "mean": scale,
    }
    files = kernel.folder_files(tmp_path)
    assert files == ["sales.csv (columns a, b; first row 1, 2)"]  # its header; no hidden files
    text = codeaction.system_prompt(kernel.variables_line(namespace), files)
    assert text.endswith("\nFiles in the working folder: sales.csv (columns a, b; first row 1, 2).")
    messages = [{"role": "system", "content": text}]

    def about(request):
        return [d.partition(" ")[0] for d in codeaction.relevant(request, messages)]

    assert about("total units by region?") == ["sales"]  # by its columns
    assert about("how many sales rows") == ["sales"]  # by its name
    assert about("use my scale function on 3 and 4") == ["scale(value,factor)"]
    assert about("the mean of units") == ["sales"]  # a function named like a word is not named
    assert about("what is the weather") == []
    (line,) = codeaction.relevant("units per region", messages)
    assert codeaction.in_kernel(line).startswith("sales is in the kernel already: DataFrame, 1 × 2")
    # the variables line moves to the request with the files line (the prompt prefix is shared)
    out = codeaction.code_messages(messages + [{"role": "user", "content": "units?"}])
    assert "Files in the working folder" not in out[0]["content"]
    assert (
        "Files in the working folder: sales.csv (columns a, b; first row 1, 2)."
        in out[-1]["content"]
    )
    assert codeaction.relevant("plot sales.csv", messages) == [
        "sales.csv is a file here: columns a, b; first row 1, 2"
    ]
    assert codeaction.relevant("read sale.csv", messages) == codeaction.relevant(
        "sales.csv", messages
    )


def test_the_variable_the_user_asked_for_is_the_one_bound():
    code = "big = t[t['v'] > 5]\nprint(len(big))"
    assert codeaction.bind_asked(
        code, "keep the rows over 5 in a variable called large", {"t"}
    ) == ("large = t[t['v'] > 5]\nprint(len(large))")
    assert codeaction.bind_asked(code, "keep the rows over 5 in big", {"t"}) == code  # not asked
    assert codeaction.bind_asked(code, "save it as big", {"t"}) == code  # already bound
    two = "a = 1\nb = 2"
    assert codeaction.bind_asked(two, "store it in a variable named c", set()) == two  # which one?


def test_a_block_that_cannot_run_is_recognised_without_running_it():
    assert codeaction.problem("'banana'.count('a')") == ""
    assert codeaction.problem("banana.count('a')") == "NameError: name 'banana' is not defined"
    assert codeaction.problem("total = 1 + 2 = 3").startswith("SyntaxError")
    assert codeaction.problem("import math\nmath.factorial(6)") == ""
    assert codeaction.problem("[y * y for y in range(3)]\nfor i in range(2):\n    print(i)") == ""
    assert codeaction.problem("df['age'].mean()", {"df"}) == ""
    assert codeaction.problem("# compute it\n\n") == "the block has no code (only comments)"
    assert (
        codeaction.problem("max(range(1000000000000))")
        == "range(1,000,000,000,000) would run for hours"
    )
    assert codeaction.problem("sum(range(1, 2 * 10 ** 9, 2))").endswith("would run for hours")
    assert (
        codeaction.problem("sum(range(1, 101))") == ""
        and codeaction.problem("list(range(n))", {"n"}) == ""
    )
    call = {"function": {"name": "python", "arguments": json.dumps({"code": "import os\nz = 1"})}}
    assert codeaction.known_names(
        [{"role": "system", "content": "s"}, {"role": "assistant", "tool_calls": [call]}]
    ) == {"os", "z"}


def test_a_block_that_waits_for_the_user_to_type_is_recognised():
    assert codeaction.problem("n = int(input('n: '))\nsum(range(n))").startswith(
        "input() would wait for the user to type"
    )
    assert codeaction.problem("breakpoint()").startswith("breakpoint() would wait")
    assert codeaction.problem("def input(p):\n    return 3\ninput('x')") == ""  # their own


def test_a_block_gets_the_imports_it_forgot():
    assert codeaction.add_imports("factorial(6)") == "from math import factorial\nfactorial(6)"
    assert codeaction.add_imports("math.sqrt(2) + median([1, 3])") == (
        "import math\nfrom statistics import median\nmath.sqrt(2) + median([1, 3])"
    )
    assert codeaction.add_imports("pd.Series([1, 2]).sum()") == (
        "import pandas as pd\npd.Series([1, 2]).sum()"
    )
    # names the code or the kernel defines, builtins, and code that does not parse: unchanged
    for code, known in (
        ("def sqrt(x):\n    return x\nsqrt(4)", ()),
        ("df['age'].max()", {"df"}),
        ("pi * 2", {"pi"}),
        ("sum(range(3))", ()),
        ("banana.count('a')", ()),
        ("x = = 1", ()),
    ):
        assert codeaction.add_imports(code, known) == code
    assert codeaction.add_imports("2 * pi") == "from math import pi\n2 * pi"
    assert codeaction.problem(codeaction.add_imports("factorial(6) + floor(2.5)")) == ""


def test_a_name_that_is_a_string_the_request_quotes_becomes_that_string():
    ask = "Use python to count the vowels in 'education' and in \"big data\"."
    assert codeaction.quote_names("sum(c in 'aeiou' for c in education)", ask) == (
        "sum(c in 'aeiou' for c in 'education')"
    )
    assert codeaction.quote_names("len(big_data)  # the words", ask) == (
        "len('big data')  # the words"
    )
    # a name the code or the kernel defines, an attribute, a name not quoted: unchanged
    for code, known in (
        ("education = 'x'\nlen(education)", ()),
        ("len(education)", {"education"}),
        ("s.education", {"s"}),
        ("len(science)", ()),
    ):
        assert codeaction.quote_names(code, ask, known) == code
    assert codeaction.quote_names("x = 'é'; len(education)", ask) == "x = 'é'; len('education')"


def test_the_examples_nearest_the_request_come_last_and_none_answers_a_task():
    shown = codeaction.examples_for("Use python to make 'Shout' lower case.")
    assert len(shown) == codeaction.SHOWN
    assert shown[-1][0] == "Use python to make 'Good Morning' lower case."
    assert codeaction.examples_for("") == (codeaction.EXAMPLES + codeaction.MORE_EXAMPLES)[:8]
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "lower case 'X'"}]
    assert code_messages(messages)[-5]["content"] == shown[-1][0]
    # a model that copies an example (its code, output or answer) passes no task of any suite
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import notebooktasks
    import notebooktasks_review
    import notebooktasks_review2
    import tasksuite

    suites = notebooktasks.TASKS + notebooktasks_review.TASKS + notebooktasks_review2.TASKS
    for task in tasksuite.TASKS + suites:
        for question, code, output, answer in codeaction.EXAMPLES + codeaction.MORE_EXAMPLES:
            copied = tasksuite.Outcome(answer, (code,), (output,), {}, task.prompt)
            assert not task.passed(copied), (task.name, question)


@pytest.mark.parametrize("example", codeaction.EXAMPLES + codeaction.MORE_EXAMPLES)
def test_every_example_is_self_contained_and_shows_what_its_code_prints(example, tmp_path):
    """No worked example carries a value about data it does not build itself, or names a
    variable its question did not name: its code reads only builtins, its own imports and what
    it builds from the question's literals; run in an empty namespace it shows exactly the
    example's output; and every name its code binds that its answer mentions is one its
    question named (so a copied answer never mentions ``sales`` when the user said ``df``)."""
    import ast
    import contextlib
    import io
    import re

    question, code, output, answer = example
    assert codeaction.problem(code) == "", code  # nothing read that the code does not define
    tree = ast.parse(code)
    namespace: dict = {}
    printed = io.StringIO()
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        with contextlib.redirect_stdout(printed):
            last = tree.body[-1]
            if isinstance(last, ast.Expr):
                exec(compile(ast.Module(tree.body[:-1], []), "<example>", "exec"), namespace)
                value = eval(compile(ast.Expression(last.value), "<example>", "eval"), namespace)
                if value is not None:
                    print(repr(value))
            else:
                exec(compile(tree, "<example>", "exec"), namespace)
    finally:
        os.chdir(cwd)
    assert printed.getvalue().strip() == output, (question, printed.getvalue())
    words = set(re.findall(r"[A-Za-z_]\w*", question))
    bound = {
        n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    }
    bound |= {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    bound |= {
        a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
    }
    for name in bound:
        if re.search(rf"\b{re.escape(name)}\b", answer):
            assert name in words, (question, name)


def test_a_request_about_the_kernel_asks_for_code_first():
    known = {"orders", "f"}
    assert codeaction.needs_code("what does f(3) return?", known)
    assert codeaction.needs_code("average amount in orders?", known)
    assert codeaction.needs_code("how many rows are in measurements.csv?")
    assert codeaction.needs_code("Explain the cause of this error and propose a fix.")
    assert not codeaction.needs_code("What is the capital of France?", known)
    system = {"role": "system", "content": codeaction.system_prompt("orders (DataFrame, 20 × 7)")}
    out = code_messages([system, {"role": "user", "content": "mean amount in orders?"}])
    assert out[-1]["content"].endswith(codeaction.NEEDS_CODE)
    out = code_messages([system, {"role": "user", "content": "capital of Peru?"}])
    assert codeaction.NEEDS_CODE not in out[-1]["content"]


def test_code_that_reads_a_file_the_folder_does_not_hold_is_recognised():
    files = ["sales.csv (columns a, b)", "notes.txt"]
    messages = [{"role": "system", "content": codeaction.system_prompt("x (int, 1)", files)}]
    assert codeaction.folder_names(messages) == {"sales.csv", "notes.txt"}
    missing = codeaction.missing_file(
        "import pandas as pd\nt = pd.read_csv('orders.csv')", messages
    )
    assert missing == "FileNotFoundError: 'orders.csv' is not in the working folder"
    assert (
        codeaction.missing_file("pd.read_csv('sales.csv')\nopen('notes.txt').read()", messages)
        == ""
    )
    written = "open('out.txt', 'w').write('1')\nprint(open('out.txt').read())"
    assert codeaction.missing_file(written, messages) == ""  # it writes the file itself
    assert codeaction.missing_file("plt.savefig('plot.png')", messages) == ""
    cut = [{"role": "system", "content": codeaction.system_prompt("", files + ["…"])}]
    assert codeaction.missing_file("open('other.txt')", cut) == ""  # the listing is cut: unknown


def test_a_kernel_variable_is_not_read_again_from_a_file_that_is_not_there():
    files = ["sales.csv (columns a, b)"]
    variables = "orders (DataFrame, 2 × 1, columns city: object e.g. 'Lyon')"
    messages = [{"role": "system", "content": codeaction.system_prompt(variables, files)}]
    code = (
        "import pandas as pd\norders = pd.read_csv('orders.csv')\n"
        "print(orders['city'].value_counts().idxmax())"
    )
    assert codeaction.drop_reloads(code, messages, {"orders"}) == (
        "import pandas as pd\nprint(orders['city'].value_counts().idxmax())"
    )
    there = "orders = pd.read_csv('sales.csv')"  # a file the folder holds: the user may mean it
    assert codeaction.drop_reloads(there, messages, {"orders"}) == there
    new = "other = pd.read_csv('orders.csv')"  # not a kernel variable: left to fail and be read
    assert codeaction.drop_reloads(new, messages, {"orders"}) == new


def test_a_block_of_only_comments_does_not_run_and_the_model_reads_why(cip, server, magics, store):
    """A block that copies the request into comments (and imports) runs nothing: not sent."""
    server.enqueue(
        Reply(text="```python\n# fix the cell\n# KeyError: 'amout'\nimport pandas as pd\n```"),
        Reply(text="```python\nshown = 2 + 3\n```"),
        Reply(text="5"),
    )
    cip.run_cell_magic("agent", "", "fix the cell")
    tools = tools_of(store, magics.session.info.id)
    assert tools[0].state.status == "error" and codeaction.EMPTY in tools[0].state.error
    assert chat_requests(server)[1]["messages"][-1] == {
        "role": "user",
        "content": "Error: " + codeaction.EMPTY,
    }
    assert cip.user_ns["shown"] == 5 and tools[1].state.status == "completed"


def test_what_counts_as_a_block_with_no_code():
    assert codeaction.is_empty("# the request\n# its error\n")
    assert codeaction.is_empty("# a comment\nimport pandas as pd\nfrom math import pi\npass\n")
    assert codeaction.is_empty("'''only a string'''")
    assert not codeaction.is_empty("# a comment\nprint(1)")
    assert not codeaction.is_empty("import os\nx = 1")
    assert not codeaction.is_empty("print(")  # a syntax error is its own problem
    assert codeaction.problem("# copy of the request\nimport math") == codeaction.EMPTY
    prose = 'fix = "The error is caused by a typo in the column name."'
    assert codeaction.is_empty(prose)  # an explanation assigned to a name runs nothing
    assert not codeaction.is_empty("name = 'Ada Lovelace'")  # a value
    asked = "set motto to 'the quick brown fox jumps over the dog'"
    assert not codeaction.is_empty("motto = 'the quick brown fox jumps over the dog'", asked)
    assert codeaction.problem(prose, (), "why?") == codeaction.EMPTY


def test_a_kernel_variable_is_not_rebound_to_data_the_model_made_up():
    variables = "orders (DataFrame, 20 × 7, columns city: object e.g. 'Lyon'), scores (list, 9)"
    system = {"role": "system", "content": codeaction.system_prompt(variables, [])}

    def drop(code: str, request: str) -> str:
        messages = [system, {"role": "user", "content": request}]
        return codeaction.drop_reloads(code, messages, {"orders", "scores"})

    made_up = (
        "import pandas as pd\n"
        "orders = pd.DataFrame({\n    'city': ['Paris', 'Nice'],\n    'amount': [10.5, -3],\n})\n"
        "print(orders['amount'].sum())"
    )
    assert drop(made_up, "total amount in orders?") == (
        "import pandas as pd\nprint(orders['amount'].sum())"
    )
    assert drop("scores = [3, 5, 8]\nprint(sum(scores))", "sum of scores") == "print(sum(scores))"
    # the user typed the data: it is what they want
    given = "scores = [3, 5, 8]\nprint(sum(scores))"
    assert drop(given, "set scores to 3, 5 and 8 and sum them") == given
    # computed from the kernel's value, a new name, or a name the kernel does not hold: kept
    for kept in (
        "orders = orders.dropna()",
        "orders = pd.DataFrame(orders)",
        "top = pd.DataFrame({'city': ['Paris']})",
        "scores = sorted(scores)",
    ):
        assert drop(kept, "clean orders") == kept
    # a name an earlier run bound (read from a file) is the user's data too
    read = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {
                    "name": "python",
                    "arguments": json.dumps({"code": "config = json.load(open('config.json'))"}),
                },
            }
        ],
    }
    messages = [system, {"role": "user", "content": "learning rate in config.json?"}, read]
    rebuilt = (
        "config = {'model': {'learning_rate': 0.001}}\nprint(config['model']['learning_rate'])"
    )
    known = codeaction.known_names(messages)
    assert "config" in known
    assert codeaction.drop_reloads(rebuilt, messages, known) == (
        "print(config['model']['learning_rate'])"
    )


def test_the_answer_after_a_run_states_only_numbers_the_output_holds():
    grounded = codeaction.grounded_answer
    # the numbers are in the output, as printed or rounded, or a share as a percentage
    assert grounded("The total is 1,234.5.", "1234.50", "") == "The total is 1,234.5."
    assert grounded("The mean is 12.35", "12.3456", "") == "The mean is 12.35"
    assert grounded("About 45% of rows", "0.4512", "") == "About 45% of rows"
    assert grounded("Row 3 of 20 has it", "20", "row 3?") == "Row 3 of 20 has it"
    assert grounded("Lyon has the most orders.", "Lyon", "") == "Lyon has the most orders."
    # a number the output does not hold is made up: the output's last line is quoted instead
    table = "  region  revenue\n0  north   310.0\n1  south   145.5"
    assert grounded("North earned 999 in revenue.", table, "") == (
        "The output says: 1  south   145.5"
    )
    assert grounded("It is 7", "[stdout] 8\n", "") == "The output says: 8"
    # after an error or an empty output the answer is left alone
    error = "Traceback (most recent call last):\nKeyError: 'x'"
    if codeaction.is_error(error):
        assert grounded("It is 7", error, "") == "It is 7"
    assert grounded("It is 7", "", "") == "It is 7"


def test_text_columns_say_when_they_hold_numbers_or_dates():
    import pandas as pd

    frame = pd.DataFrame(
        {
            "price": ["$1,299.00", "24.50", "€8.99"],
            "share": ["12%", "3.5 %", "-4%"],
            "day": ["2023-04-01", "2023-04-02", "2023-05-30 10:00"],
            "us_day": ["4/1/2023", "12/31/2022", "1/2/2023"],
            "city": ["Lyon", "12", "Paris"],  # not every value: plain text
            "code": ["A-12", "B-7", "C-1"],
        }
    )
    text = kernel.columns_text(frame)
    assert "price: str of numbers e.g. '$1,299.00'" in text.replace("object", "str")
    assert "share: str of numbers" in text.replace("object", "str")
    assert "day: str of dates" in text.replace("object", "str")
    assert "us_day: str of dates" in text.replace("object", "str")
    assert "city: str e.g." in text.replace("object", "str")
    assert "code: str e.g." in text.replace("object", "str")
    assert kernel.text_kind(["1.5", None]) == ""  # a missing value says nothing either way


def test_a_file_shows_what_head_shows(tmp_path):
    (tmp_path / "v.csv").write_text('day,"visitors (n)"\n2024-03-28,140\n2024-03-29,150\n')
    (tmp_path / "e.tsv").write_text("a\tb\n")
    (tmp_path / "app.log").write_text("\n\n2024-01-02 12:00:01 ERROR db (slow) took 300 ms\nnext\n")
    (tmp_path / "empty.txt").write_text("\n")
    (tmp_path / "bin.dat").write_bytes(b"\0\1")
    assert kernel.folder_files(tmp_path) == [
        "app.log (text, first line '2024-01-02 12:00:01 ERROR db [slow] took 300 ms')",
        "bin.dat",
        "e.tsv (columns a, b)",
        "empty.txt (text, empty)",
        "v.csv (columns day, visitors [n]; first row 2024-03-28, 140; dates in day)",
    ]


def test_one_line_functions_show_what_they_return(ip):
    ip.run_cell(
        "def discount(price, pct):\n"
        "    '''The price after pct percent off.'''\n"
        "    return price * (1 - pct / 100)\n"
        "def two_steps(x):\n    y = x + 1\n    return y\n"
        "helper = lambda v: v\n",
        silent=True,
    )
    try:
        lines = kernel.shell_function_lines(ip)
        assert "discount(price,pct) returns price * (1 - pct / 100)" in lines
        assert not any(ln.startswith(("two_steps", "helper")) for ln in lines)
        prompt = codeaction.system_prompt(kernel.shell_variables_line(ip), [], lines)
        assert prompt.endswith(
            "\nShort functions of the notebook: discount(price,pct) returns price * (1 - pct / 100)."
        )
        messages = [
            {"role": "system", "content": prompt},
            {"role": "user", "content": "use my discount function on 80 with 25%"},
        ]
        (about,) = codeaction.relevant(messages[-1]["content"], messages)
        assert codeaction.in_kernel(about) == (
            "discount(price,pct) is a function defined in the notebook: "
            "it returns price * (1 - pct / 100)"
        )
    finally:
        for name in ("discount", "two_steps", "helper"):
            ip.user_ns.pop(name, None)


def _kernel_messages() -> list[dict]:
    variables = (
        "orders (DataFrame, 20 × 3, columns city: str e.g. 'Lyon', amount: float64, "
        "quantity: int64), regions (DataFrame, 4 × 2, columns city: str e.g. 'Lyon', "
        "region: str e.g. 'north'), scores (list, len 3, [1, 2, 3])"
    )
    files = ["events.json (list of 7 records with keys ts, level)", "m.csv (columns a, b)"]
    files.append("notes.txt (text, first line 'hello')")
    return [{"role": "system", "content": codeaction.system_prompt(variables, files)}]


def test_an_error_names_where_its_missing_column_or_name_is():
    messages = _kernel_messages()
    hint = codeaction.error_hint
    assert hint("KeyError: 'amout'", messages) == " (did you mean 'amount'?)"
    assert hint("KeyError: 'region'", messages) == " ('region' is a column of regions)"
    assert hint("KeyError: 'city'", messages) == " ('city' is a column of orders and regions)"
    assert (
        hint("AttributeError: 'DataFrame' object has no attribute 'quantiy'", messages)
        == " (did you mean 'quantity'?)"
    )
    assert hint("NameError: name 'score' is not defined", messages) == " (did you mean 'scores'?)"
    assert hint("KeyError: 'zzz'", messages) == ""  # nothing near: no guess
    assert hint("ValueError: could not convert 'amout'", messages) == ""
    assert codeaction.last_error("Traceback ...\n  File x\nKeyError: 'region'\n") == (
        "KeyError: 'region'"
    )


def test_a_file_named_like_a_variable_is_read():
    messages = _kernel_messages()
    code = "print(len(events.json))\nx = m.csv\nnotes.txt.count('a')\ny = other.csv"
    assert codeaction.add_imports(codeaction.load_files(code, messages)) == (
        "import json\nimport pandas as pd\n"
        "print(len(json.load(open('events.json'))))\nx = pd.read_csv('m.csv')\n"
        "open('notes.txt').read().count('a')\ny = other.csv"  # not a file here: left alone
    )
    events = "events = load()\nevents.json"  # a variable of that name: its attribute
    assert codeaction.load_files(events, messages) == events


def test_a_return_outside_a_function_shows_its_value():
    code = (
        "with open('e.json') as f:\n    n = len(f.read())\n    return n\n"
        "def g(x):\n    return x\nif n:\n    return\n"
    )
    assert codeaction.print_returns(code) == (
        "with open('e.json') as f:\n    n = len(f.read())\n    print(n)\n"
        "def g(x):\n    return x\nif n:\n    pass\n"
    )
    compile(codeaction.print_returns(code), "<block>", "exec")  # it runs now
    assert codeaction.print_returns("return (1 +\n   2)") == "print(1 +\n   2)"


def test_what_the_code_is_about_says_how_to_read_and_parse_it():
    variables = (
        "products (DataFrame, 6 × 3, columns item: str e.g. 'laptop', price: str of numbers "
        "e.g. '$1,299.00', sold: object of dates e.g. '2024-01-02')"
    )
    files = [
        "visits.csv (columns day, visitors; first row 2024-03-28, 140; dates in day)",
        "events.json (list of 7 records with keys ts, level)",
        "notes.txt (text, first line 'hello')",
    ]
    messages = [{"role": "system", "content": codeaction.system_prompt(variables, files)}]
    said = {n: codeaction.in_kernel(t) for n, t in codeaction.described(messages).items()}
    assert said["products"].split("\n")[1:] == [
        "# price as numbers: products['price'].str.replace(r'[^0-9.-]', '', regex=True)"
        ".astype(float)",
        "# sold as dates: pd.to_datetime(products['sold'])",
    ]
    assert said["visits.csv"].endswith(
        "\n# read it with pd.read_csv('visits.csv', parse_dates=['day'])"
    )
    assert said["events.json"].endswith("\n# read it with json.load(open('events.json'))")
    assert "\n" not in said["notes.txt"]
    import pandas as pd  # the hint parses what the kernel holds

    frame = pd.DataFrame({"price": ["$1,299.00", "24.50", "-3"]})
    assert frame["price"].str.replace(r"[^0-9.-]", "", regex=True).astype(float).sum() == 1320.5


def test_a_missing_file_names_the_nearest_one_and_a_csv_its_columns(tmp_path):
    (tmp_path / "visits.csv").write_text("day,visitors\n2024-03-28,140\n")
    files = kernel.folder_files(tmp_path)
    assert files == ["visits.csv (columns day, visitors; first row 2024-03-28, 140; dates in day)"]
    messages = [{"role": "system", "content": codeaction.system_prompt("", files)}]
    hint = codeaction.error_hint
    missing = "FileNotFoundError: [Errno 2] No such file or directory: 'visit.csv'"
    assert hint(missing, messages) == " (did you mean 'visits.csv'?)"
    assert hint("FileNotFoundError: [Errno 2] No such file: 'zz.txt'", messages) == ""
    assert hint("KeyError: 'visitors'", messages) == " ('visitors' is a column of visits.csv)"


def test_a_variable_the_request_names_is_described_whatever_its_age():
    import pandas as pd

    namespace: dict = {"tx": pd.DataFrame({"merchant": ["a"], "amount": [1.5]})}
    namespace.update({f"v{i}": i for i in range(12)})  # twelve newer variables
    plain = kernel.variables_line(namespace)
    assert "tx (" not in plain and "tx" in plain.split("; also ")[1]  # only named
    asked = kernel.variables_line(namespace, request="total amount per merchant in tx?")
    assert asked.startswith("tx (DataFrame, 1 × 2, columns merchant: ")
    assert "v11 (int, 11)" in asked  # the newest are still described
    messages = [{"role": "system", "content": codeaction.system_prompt(asked)}]
    (about,) = codeaction.relevant("total amount per merchant in tx?", messages)
    assert codeaction.in_kernel(about).startswith("tx is in the kernel already: DataFrame, 1 × 2")


def test_a_turn_describes_an_old_variable_its_prompt_names(cip, server, magics):
    cip.run_cell(
        "import pandas as pd\nledger_old = pd.DataFrame({'merchant': ['a'], 'amount': [2]})"
    )
    cip.run_cell("\n".join(f"newer{i} = {i}" for i in range(10)))
    try:
        server.enqueue(Reply(text="fine"), Reply(text="fine"))
        cip.run_cell_magic("agent", "--new", "total amount in ledger_old?")
        cip.run_cell_magic("agent", "--new", "how are you?")
        asked, other = (
            json.dumps(r["messages"], ensure_ascii=False) for r in chat_requests(server)[-2:]
        )
        assert "ledger_old (DataFrame, 1 × 2, columns merchant:" in asked
        assert "ledger_old (DataFrame" not in other and "ledger_old" in other  # only named
    finally:
        for name in ["pd", "ledger_old"] + [f"newer{i}" for i in range(10)]:
            cip.user_ns.pop(name, None)


def test_a_json_config_shows_the_keys_of_its_sections(tmp_path):
    config = {"model": "gbm", "params": {"learning_rate": 0.05, "depth": 3}, "seed": 1}
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert kernel.folder_files(tmp_path) == [
        "config.json (object with keys model, params with keys learning_rate/depth, seed)"
    ]


def test_an_old_dataframe_whose_columns_the_request_names_is_described():
    import pandas as pd

    namespace: dict = {"tx": pd.DataFrame({"category": ["food"], "amount": [1.5]})}
    namespace.update({f"v{i}": i for i in range(12)})
    line = kernel.variables_line(namespace, request="top 2 categories by total amount")
    assert line.startswith("tx (DataFrame, 1 × 2, columns category: ")
    assert "tx (" not in kernel.variables_line(namespace, request="how are you today?")
    assert codeaction.stem("categories") == "category" and codeaction.stem("orders") == "order"
    assert codeaction.stem("bus") == "bus" and codeaction.stem("Cities") == "city"


def _traceback_of(code: str, namespace: dict) -> str:
    """The traceback the python tool shows for ``code`` (its file named like the tool's)."""
    import linecache
    import traceback

    filename = "<python-tool call_1>"
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    try:
        exec(compile(code, filename, "exec"), namespace)
    except Exception as exc:  # noqa: BLE001 - the point is its traceback
        return "".join(traceback.format_exception(exc))
    raise AssertionError("no error")


def test_a_failing_line_sent_again_unchanged_is_a_repeat():
    import pandas as pd

    ledger = pd.DataFrame({"a": [1]})
    failed = _traceback_of(
        "x = 1\nledger.append({'a': 2}, ignore_index=True)\n", {"ledger": ledger}
    )
    line = codeaction.raised_line(failed)
    assert line == "ledger.append({'a': 2}, ignore_index=True)"
    again = "# add the row\nledger.append({'a': 2}, ignore_index=True)\nprint(ledger)"
    assert codeaction.repeats_failure(again, line)
    fixed = "ledger = pd.concat([ledger, pd.DataFrame([{'a': 2}])], ignore_index=True)"
    assert not codeaction.repeats_failure(fixed, line)
    rebound = "ledger = ledger.to_dict('list')\nledger.append({'a': 2}, ignore_index=True)"
    assert not codeaction.repeats_failure(rebound, line)  # what it reads changed first
    # inside a library, the block's line misused it; inside a notebook function, it only called
    assert codeaction.raised_line(_traceback_of("import json\njson.loads('{')\n", {})) == (
        "json.loads('{')"
    )
    cell: dict = {}
    exec(
        compile("def average(xs):\n    return sum(xs) / len(xs)\n", "<ipython-input-1-ab>", "exec"),
        cell,
    )
    assert codeaction.raised_line(_traceback_of("average([])\n", cell)) == ""
    assert codeaction.raised_line("KeyError: 'a'") == ""
