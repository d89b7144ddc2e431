"""No API key lands in the history, an export, a notebook output or a log.

Unit cases for ``redact.py``, then a session run with keys in the environment
and tools that echo them (bash, python, read, a truncated output, an error),
scanning every file under the data directory, the SQL views, the captured
display data, ``%agent show``, exports and log records.
"""

from __future__ import annotations

import json
import logging

import pytest
from IPython.utils.capture import capture_output

from jupyter_session_agent.core import redact as R
from jupyter_session_agent.testing.scripted_server import Reply

OPENAI = "sk-proj-" + "Ab3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hJ6kL9"
ANTHROPIC = "sk-ant-api03-" + "Zy8Xw7Vu6Ts5Rq4Po3Nm2Lk1Jh0Gf9Ed8"
AWS = "AKIA" + "IOSFODNN7EXAMPLE"
GITHUB = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
GITHUB_PAT = "github_pat_" + "11ABCDEFG0" + "x" * 50
SLACK = "xoxb-" + "123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"
GOOGLE = "AIza" + "SyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q"
TOKEN = "tok-Zq9Xw8Vu7Ts6Rq5"  # an env value with no known format


@pytest.mark.parametrize(
    "secret,kind",
    [
        (OPENAI, "openai"),
        ("sk-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8S9t0U1v2W3x4", "openai"),
        (ANTHROPIC, "anthropic"),
        (AWS, "aws"),
        (GITHUB, "github"),
        (GITHUB_PAT, "github"),
        (SLACK, "slack"),
        (GOOGLE, "google"),
    ],
)
def test_known_key_formats_are_redacted(secret, kind):
    assert R.redact(f"the key is {secret}.") == f"the key is [REDACTED:{kind}]."
    assert R.contains_secret(secret)


def test_bearer_tokens_and_environment_secrets(monkeypatch):
    assert (
        R.redact("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIi.abc-123")
        == "Authorization: Bearer [REDACTED:bearer]"
    )
    monkeypatch.setenv("MY_SERVICE_TOKEN", TOKEN)
    monkeypatch.setenv("DB_PASSWORD", "correct horse battery")
    monkeypatch.setenv(
        "TOKENIZERS_PARALLELISM", "false"
    )  # a secret-looking name, not a secret value
    monkeypatch.setenv("SSH_KEY_PATH", "/home/u/.ssh/id_ed25519")  # paths are left alone
    monkeypatch.setenv("API_KEY_SHORT", "abc")  # too short to be sure
    text = f"token={TOKEN} pw=correct horse battery parallel=false path=/home/u/.ssh/id_ed25519 abc"
    assert R.redact(text, refresh=True) == (
        "token=[REDACTED:MY_SERVICE_TOKEN] pw=[REDACTED:DB_PASSWORD] parallel=false path=/home/u/.ssh/id_ed25519 abc"
    )


def test_look_alikes_are_left_alone():
    for text in (
        "task-runner-abcdefghijklmnopqrstuvwxyz",
        "sk-short",
        "desk-abcdefghijklmnopqrstuvwxyz0123",
        "AKIA-not-a-key",
        "a bearer of news",
        "ghp_short",
    ):
        assert R.redact(text) == text


def test_redacting_serialised_json_keeps_it_valid(monkeypatch):
    monkeypatch.setenv("WEIRD_SECRET", 'pa"ss\\word-123')
    row = {"data": {"text": f'{OPENAI} and pa"ss\\word-123', "n": 12345678}}
    line = R.redact(json.dumps(row, ensure_ascii=False), refresh=True)
    assert json.loads(line) == {
        "data": {"text": "[REDACTED:openai] and [REDACTED:WEIRD_SECRET]", "n": 12345678}
    }


def test_redact_value_walks_containers():
    assert R.redact_value({"a": [OPENAI, 1], OPENAI: (AWS,)}) == {
        "a": ["[REDACTED:openai]", 1],
        "[REDACTED:openai]": ("[REDACTED:aws]",),
    }


# -- a whole session ---------------------------------------------------------------


def test_no_key_in_history_exports_outputs_or_logs(
    ip, server, store, magics, tmp_path, data_dir, monkeypatch, caplog
):
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI)  # the key the provider really sends
    monkeypatch.setenv("MY_SERVICE_TOKEN", TOKEN)
    (tmp_path / "creds.txt").write_text(
        f"aws = {AWS}\ngithub = {GITHUB}\nslack = {SLACK}\nclaude = {ANTHROPIC}\n"
    )
    secrets = [OPENAI, TOKEN, AWS, GITHUB, SLACK, ANTHROPIC]
    big = "; ".join(["for i in $(seq 1 3000); do echo line $i $OPENAI_API_KEY; done"])
    server.enqueue(
        Reply(
            tool_calls=(
                {
                    "name": "bash",
                    "arguments": {"command": "echo $OPENAI_API_KEY; echo $MY_SERVICE_TOKEN"},
                },
                {
                    "name": "python",
                    "arguments": {
                        "code": "import os\nprint(os.environ['OPENAI_API_KEY'])\n"
                        "raise ValueError('bad token ' + os.environ['MY_SERVICE_TOKEN'])"
                    },
                },
                {"name": "read", "arguments": {"filePath": "creds.txt"}},
                {
                    "name": "bash",
                    "arguments": {"command": big},
                },  # truncated: the full output is saved too
            )
        ),
        Reply(text="All four ran."),
    )
    caplog.set_level(logging.DEBUG)
    with capture_output() as out:
        magics.current(new=True)
        ip.run_cell_magic("agent", "", f"Here is my key {OPENAI}; echo it back")
        shown = ip.run_line_magic("agent", "show")
    session = magics.session
    session.wait_title()
    tools = [p for m in store.messages(session.info.id) for p in m.parts if p.type == "tool"]
    assert [t.state.status for t in tools] == ["completed", "completed", "completed", "completed"]
    assert (
        "[REDACTED:OPENAI_API_KEY]" in tools[0].state.output
        and "[REDACTED:MY_SERVICE_TOKEN]" in tools[0].state.output
    )
    assert "ValueError: bad token [REDACTED:MY_SERVICE_TOKEN]" in tools[1].state.output
    assert (
        "[REDACTED:aws]" in tools[2].state.output and "[REDACTED:github]" in tools[2].state.output
    )
    assert (
        "[REDACTED:anthropic]" in tools[2].state.output
        and "[REDACTED:slack]" in tools[2].state.output
    )
    assert tools[3].state.metadata["truncated"] is True

    # what the model received
    sent = json.dumps(server.requests, ensure_ascii=False)
    # what the cell showed, what the magics printed, what was logged
    shown_text = getattr(shown, "text", "")
    shown_text = shown_text() if callable(shown_text) else shown_text
    outputs = [out.stdout, out.stderr, repr(shown), str(shown_text), caplog.text]
    outputs += [json.dumps(o.data, ensure_ascii=False, default=str) for o in out.outputs]
    # everything under the data directory: journals, parquet, saved tool outputs, logs
    files = {
        str(p): p.read_bytes().decode("utf-8", "replace")
        for p in data_dir.rglob("*")
        if p.is_file()
    }
    assert any("tool-output" in name for name in files), "the truncated output was saved"
    # the SQL views (covers compacted parquet whose bytes are compressed) and exports
    tables = [store.sql(f"select * from {t}").to_json() for t in ("session", "message", "part")]
    exports = []
    for fmt in ("md", "json", "html"):
        try:
            exports.append(str(session.export(fmt)))
        except Exception as err:  # an export format not available in this build is not a leak
            exports.append(f"(export {fmt}: {type(err).__name__})")
    haystacks = {
        "requests": sent,
        **{f"output {i}": o for i, o in enumerate(outputs)},
        **files,
        **{f"sql {i}": t for i, t in enumerate(tables)},
        **{f"export {i}": e for i, e in enumerate(exports)},
    }
    leaks = [
        (where, secret[:12])
        for where, text in haystacks.items()
        for secret in secrets
        if secret in text
    ]
    assert leaks == [], leaks


def test_the_store_redacts_every_line_it_writes(tmp_path):
    """The last line of defence: whatever produced a value, its journal line holds no key."""
    from jupyter_session_agent.core.messages import Session, TextPart
    from jupyter_session_agent.store import Store

    store = Store(tmp_path)
    try:
        session = Session(
            id="ses_1",
            directory=str(tmp_path),
            title=f"about {GITHUB}",
            time_created=1,
            time_updated=1,
        )
        part = TextPart("prt_1", "ses_1", "msg_1", text=f"model text with {OPENAI} in it")
        store.put(session, part)
        store.flush()
        journal = "".join(p.read_text() for p in (tmp_path / "history").rglob("*.jsonl"))
        assert OPENAI not in journal and GITHUB not in journal
        # the label is the kind, or the variable's name once the value was seen in the environment
        assert journal.count("[REDACTED:") == 2
        assert all(json.loads(line) for line in journal.splitlines())
    finally:
        store.close()
