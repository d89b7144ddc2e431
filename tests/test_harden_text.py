"""Text that is not UTF-8 never breaks a session.

A latin-1 file name (``os.listdir`` gives ``"caf\\udce9.txt"``), a prompt with a lone
surrogate, a server streaming the halves of a surrogate pair: each turn completes, the next
turn succeeds, export, ``sql()`` and a new process reading the history work, and every byte
written (journals, saved tool outputs, exports) is valid UTF-8.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from IPython.utils.capture import capture_output

from jupyter_session_agent.core.text import decode, has_surrogates, safe_text, safe_value
from jupyter_session_agent.testing.scripted_server import Reply

NAME = b"caf\xe9.txt"  # latin-1 bytes: not UTF-8
SHOWN = "caf\\xe9.txt"  # how every outbound path writes the name: the byte in Python's notation


def _strict(data_dir) -> dict[str, str]:
    """The journals and saved tool outputs, decoded as strict UTF-8 (raises if one is not)."""
    files = [*data_dir.glob("history/**/*.jsonl"), *data_dir.glob("tool-output/*")]
    assert files
    return {str(p): p.read_bytes().decode("utf-8") for p in files}


def _encodable(value) -> None:
    json.dumps(value, ensure_ascii=False, default=str).encode("utf-8")


def _still_works(ip, server, store, magics, data_dir, out) -> dict:
    """After the bad input: the next turn, exports, SQL and a new process all work."""
    session = magics.session
    for o in out.outputs:  # what the cell showed can be sent to a front end
        _encodable([o.data, o.metadata])
    out.stdout.encode("utf-8")
    server.enqueue(Reply(text="Next turn fine."))
    with capture_output():
        ip.run_cell_magic("agent", "", "and now?")
    assert session.history[-1].parts[-2].text == "Next turn fine."
    _encodable(server.requests)
    for fmt in ("md", "html", "json"):
        path = session.export(fmt, data_dir.parent / f"out.{fmt}")
        path.read_bytes().decode("utf-8")
    assert store.sql("select count(*) as n from part")["n"][0] > 0
    assert len(ip.run_line_magic("agent", "sql select id from message")) == len(session.history)
    journals = _strict(data_dir)
    for name, text in journals.items():
        if name.endswith(".jsonl"):
            [json.loads(line) for line in text.splitlines() if line.strip()]
    probe = textwrap.dedent(f"""
        import json, sys
        from jupyter_session_agent.store import Store
        store = Store({str(data_dir)!r})
        history = store.messages({session.info.id!r})
        n = int(store.sql("select count(*) as n from part")["n"][0])
        print(json.dumps({{"history": [m.to_data() for m in history], "parts": n}}))
        store.close()
    """)
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    later = json.loads(done.stdout.strip().splitlines()[-1])
    # the other process reads exactly what this one holds in memory (and shows)
    assert later["history"] == [m.to_data() for m in session.history]
    return later


@pytest.mark.parametrize(
    "tool,args,expected",
    [
        ("list", {}, SHOWN),
        ("glob", {"pattern": "*.txt"}, SHOWN),
        ("grep", {"pattern": "cr"}, SHOWN),
        ("read", {"filePath": os.fsdecode(NAME)}, "cr"),
        ("bash", {"command": "ls; cat caf*.txt"}, "caf"),
        ("python", {"code": "import os\nprint(*sorted(os.listdir('.')))"}, SHOWN),
    ],
)
def test_a_latin1_file_name_never_breaks_the_session(
    ip, server, store, magics, data_dir, tmp_path, tool, args, expected
):
    fd = os.open(os.path.join(os.fsencode(tmp_path), NAME), os.O_CREAT | os.O_WRONLY)
    os.write(fd, b"caf\xe9 cr\xe8me\n")
    os.close(fd)
    server.enqueue(Reply(tool_calls=({"name": tool, "arguments": args},)), Reply(text="Seen it."))
    with capture_output() as out:
        magics.current(new=True)
        ip.run_cell_magic("agent", "", "look at the folder")
    session = magics.session
    part = next(p for m in session.history for p in m.parts if p.type == "tool")
    assert part.state.status == "completed", part.state
    assert expected in part.state.output
    assert not has_surrogates(json.dumps(part.to_data(), ensure_ascii=False))
    if tool == "read":  # the model's path (a surrogate in JSON) opened the file; stored escaped
        assert part.state.input == {"filePath": SHOWN}
    # what the model got back in the next request is that same text
    assert server.requests[1]["messages"][-1]["content"] == part.state.output
    _still_works(ip, server, store, magics, data_dir, out)


def test_a_prompt_with_a_lone_surrogate_never_breaks_the_session(
    ip, server, store, magics, data_dir
):
    server.enqueue(Reply(text="Odd prompt."))
    with capture_output() as out:
        magics.current(new=True)
        ip.run_cell_magic("agent", "", "hello \ud800 and caf\udce9")
    session = magics.session
    assert session.history[0].parts[0].text == "hello \\ud800 and caf\\xe9"
    assert server.requests[0]["messages"][-1]["content"] == "hello \\ud800 and caf\\xe9"
    later = _still_works(ip, server, store, magics, data_dir, out)
    assert later["history"][0]["parts"][0]["text"] == "hello \\ud800 and caf\\xe9"


def test_a_server_streaming_surrogates_never_breaks_the_session(
    ip, server, store, magics, data_dir
):
    """Halves of a pair in separate chunks are joined; lone ones are escaped."""
    server.enqueue(
        Reply(
            text="smile \ud83d\ude00, lone \ud800 end",
            chunk_chars=1,
            tool_calls=({"name": "python", "arguments": {"code": "x = '\ud800'\nprint('ok')"}},),
        ),
        Reply(text="Done \udce9."),
    )
    with capture_output() as out:
        magics.current(new=True)
        ip.run_cell_magic("agent", "", "say something odd")
    session = magics.session
    texts = [p.text for m in session.history for p in m.parts if p.type == "text"]
    assert texts[1:] == ["smile 😀, lone \\ud800 end", "Done \\xe9."]
    tool = next(p for m in session.history for p in m.parts if p.type == "tool")
    assert tool.state.input == {"code": "x = '\\ud800'\nprint('ok')"}
    # Python cannot compile a lone surrogate: the model reads why, the session goes on
    assert tool.state.status == "completed" and tool.state.metadata["error"] == "UnicodeEncodeError"
    _still_works(ip, server, store, magics, data_dir, out)


def test_a_truncated_output_with_latin1_names_is_saved_as_utf8(
    ip, server, store, magics, data_dir, tmp_path
):
    os.close(os.open(os.path.join(os.fsencode(tmp_path), NAME), os.O_CREAT | os.O_WRONLY))
    code = (
        "import os\nname = os.fsdecode(b'caf\\xe9.txt')\nfor i in range(3000):\n    print(i, name)"
    )
    server.enqueue(
        Reply(tool_calls=({"name": "python", "arguments": {"code": code}},)), Reply(text="Long.")
    )
    with capture_output() as out:
        magics.current(new=True)
        ip.run_cell_magic("agent", "", "print a lot")
    tool = next(p for m in magics.session.history for p in m.parts if p.type == "tool")
    assert tool.state.metadata["truncated"] is True
    saved = open(tool.state.metadata["outputPath"], "rb").read().decode("utf-8")
    assert saved.count(SHOWN) == 3000
    _still_works(ip, server, store, magics, data_dir, out)


def test_an_imported_bundle_with_surrogates_is_stored_encodable(ip, store, magics, tmp_path):
    from jupyter_session_agent.exchange.transfer import import_bundle

    bundle = {
        "info": {
            "id": "ses_fffffffffffe0000000000abcd",
            "title": "t \ud800",
            "directory": str(tmp_path),
            "version": "0.1.0",
            "time": {"created": 1, "updated": 1},
        },
        "messages": [
            {
                "info": {
                    "id": "msg_0000000001aaaaaaaaaaaaaaaa",
                    "role": "user",
                    "time": {"created": 1},
                    "agent": "build",
                    "model": {"providerID": "openai", "modelID": "scripted"},
                },
                "parts": [
                    {"id": "prt_0000000001aaaaaaaaaaaaaaaa", "type": "text", "text": "caf\udce9"}
                ],
            }
        ],
    }
    path = tmp_path / "bundle.json"
    # ASCII escapes: valid JSON holding lone surrogates
    path.write_text(json.dumps(bundle), encoding="utf-8")
    import_bundle(store, path)
    history = store.messages("ses_fffffffffffe0000000000abcd")
    assert history[0].parts[0].text == "caf\\xe9"
    assert store.session("ses_fffffffffffe0000000000abcd").title == "t \\ud800"
    rows = store.sql(
        "select data->>'text' as t from part where session_id = $1",
        ["ses_fffffffffffe0000000000abcd"],
    )
    text = rows["t"][0]
    assert text == "caf\\xe9"
    # the same bundle again: unchanged (what is stored is what the bundle cleans to)
    assert str(import_bundle(store, path)).endswith("nothing imported")


# -- the function every path uses ----------------------------------------------------


def test_safe_text():
    assert safe_text("plain ascii") == "plain ascii"
    assert safe_text("café 😀") == "café 😀"
    assert safe_text("caf\udce9.txt") == "caf\\xe9.txt"
    assert safe_text("a\ud800b\udfffc") == "a\\ud800b\\udfffc"
    assert safe_text("\ud83d\ude00") == "😀"  # the halves of a pair, joined
    assert safe_text("\ude00\ud83d") == "\\ude00\\ud83d"  # in the wrong order: two lone ones
    for text in ("caf\udce9", "x\ud800", "\ud83d\ude00 \udc80"):
        safe_text(text).encode("utf-8")
        serialised = json.dumps({"k\udce9": text}, ensure_ascii=False)
        fixed = safe_text(serialised, json=True)
        assert json.loads(fixed) == {safe_text("k\udce9"): safe_text(text)}
    assert decode(b"caf\xe9 \xff ok \xc3\xa9") == "caf\\xe9 \\xff ok é"
    value = {"a": ["ok", ("x\ud800",)], "b": 1}
    assert safe_value(value) == {"a": ["ok", ("x\\ud800",)], "b": 1}
    clean = {"a": ["ok", ("é",)], "b": 1}
    assert safe_value(clean) is clean


def test_a_secret_with_undecodable_bytes_is_still_redacted():
    from jupyter_session_agent.core import redact as R

    secret = os.fsdecode(b"pa\xe9ss-word-123456")
    R.remember(secret, "ODD_PASSWORD")
    assert R.clean(f"x {secret} y") == "x [REDACTED:ODD_PASSWORD] y"
    assert R.clean(f"x {safe_text(secret)} y") == "x [REDACTED:ODD_PASSWORD] y"


def test_a_session_in_a_latin1_folder_works_when_another_process_opens_it(
    ip, server, store, magics, tmp_path, monkeypatch
):
    folder = os.path.join(os.fsencode(tmp_path), b"proj\xe9")
    os.mkdir(folder)
    open(os.path.join(folder, b"notes.txt"), "w").close()
    monkeypatch.chdir(folder)
    server.enqueue(Reply(text="Hello."))
    with capture_output():
        magics.current(new=True)
        ip.run_cell_magic("agent", "", "hi")
    session_id = magics.session.info.id
    assert store.session(session_id).directory.endswith("proj\\xe9")  # stored as safe_text shows it
    server.enqueue(Reply(tool_calls=({"name": "list", "arguments": {}},)), Reply(text="Listed."))
    script = textwrap.dedent(f"""
        import json
        from IPython.core.interactiveshell import InteractiveShell
        from IPython.utils.capture import capture_output
        ip = InteractiveShell.instance()
        ip.run_line_magic("load_ext", "jupyter_session_agent")
        magics = ip.magics_manager.registry["AgentMagics"]
        magics.model, magics.titles, magics.permission = "openai/scripted", False, {{"*": "allow"}}
        with capture_output():
            ip.run_line_magic("agent", "use {session_id}")
            ip.run_cell_magic("agent", "", "list the folder")
        tool = next(p for m in magics.session.history for p in m.parts if p.type == "tool")
        print(json.dumps({{"status": tool.state.status, "output": getattr(tool.state, "output", ""),
                          "error": getattr(tool.state, "error", "")}}))
        ip.run_line_magic("unload_ext", "jupyter_session_agent")
    """)
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(tmp_path),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["status"] == "completed" and "notes.txt" in result["output"], result
