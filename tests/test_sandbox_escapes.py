# ruff: noqa: F811  (the fixtures of test_sandbox.py, imported to be used by name)
"""What a confined command could still reach, and the secrets a name or format gives away.

Through the public path (a real IPython shell running ``%%agent`` against the scripted
server, which scripts the model's bash calls); the assertions look at what the model server
received and at a listener outside the sandbox:

* the kernel's environment: only harmless variables reach a command (a Slack webhook, an
  Azure connection string, a Stripe webhook secret, URL-encoded credentials in variables
  whose names say nothing never reach it);
* live secrets outside the classic credential stores: Jupyter's runtime folder (kernel
  connection keys run code in the kernel, server files hold a login token), git's and
  cargo's credential files, shell histories — hidden by the OS even when every read is
  allowed;
* Unix-domain sockets: a socket file outside is reachable through a read-only mount, and
  whatever listens on it runs unconfined; the sandbox refuses ``socket(AF_UNIX)``;
* secret formats in any output (webhooks, connection strings, ``whsec_``, URL-encoded
  passwords), redacted before the model or the history sees them.
"""

from __future__ import annotations

import json
import socket
import threading

from tests.test_sandbox import area, bash, home, run, sandboxed, sent, tools_of  # noqa: F401

SECRETS = {
    "SLACK_WEBHOOK_URL": "https://hooks.slack.com/services/T0ABCDEFG/B0ABCDEFG/WEBHOOKSECRETabcdefghij",
    "AZURE_STORAGE_CONNECTION_STRING": "DefaultEndpointsProtocol=https;AccountName=acct;"
    "AccountKey=QVpVUkVTRUNSRVRBQkNERUZHSElKS0w=;EndpointSuffix=core.windows.net",
    "STRIPE_WEBHOOK": "whsec_STRIPEWHSECRETabcdefghijklmnop",
    "MYSERVICE": "https%3A%2F%2Fuser%3AURLENCODEDSECRET%40host",
}
MARKS = ("WEBHOOKSECRET", "QVpVUkVTRUNSRVRBQkNERUZHSElKS0w", "STRIPEWHSECRET", "URLENCODEDSECRET")


def _outputs(store, magics):
    return [
        (p.state.status, getattr(p.state, "output", None) or "")
        for p in tools_of(store, magics.session.info.id)
    ]


def test_environment_runtime_files_and_sockets_stay_outside(
    ip, server, store, magics, sandboxed, area, monkeypatch
):
    home = sandboxed
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    runtime = home / ".local/share/jupyter/runtime"
    runtime.mkdir(parents=True)
    (runtime / "kernel-1.json").write_text('{"key": "KERNELHMACSECRET", "transport": "tcp"}')
    (runtime / "jpserver-1.json").write_text('{"token": "JPSERVERTOKENSECRET"}')
    (home / ".config/git").mkdir(parents=True)
    (home / ".config/git/credentials").write_text("https://u:GITCFGSECRET@example.com\n")
    (home / ".cargo").mkdir()
    (home / ".cargo/credentials.toml").write_text('[registry]\ntoken = "CARGOSECRET"\n')
    (home / ".bash_history").write_text("export X=HISTORYSECRET\n")

    listener = socket.socket(socket.AF_UNIX)
    address = str(area / "outside.sock")
    listener.bind(address)
    listener.listen(1)
    listener.settimeout(15)
    reached: list[bytes] = []

    def accept() -> None:
        try:
            conn, _ = listener.accept()
            reached.append(conn.recv(100))
        except OSError:
            pass

    waiter = threading.Thread(target=accept)
    waiter.start()
    magics.permission = {"read": "allow"}  # the OS, not the checker, must hide them
    connect = (
        "import socket; s = socket.socket(socket.AF_UNIX); "
        f"s.connect({address!r}); s.send(b'ESCAPED')"
    )
    bash(
        server,
        "env; printenv SLACK_WEBHOOK_URL MYSERVICE; echo envdone",
        "cat ~/.local/share/jupyter/runtime/*.json; ls -a ~/.local/share/jupyter/runtime",
        "cat ~/.config/git/credentials ~/.cargo/credentials.toml ~/.bash_history; echo readdone",
        f'python3 -c "{connect}"; echo "rc=$?"',
    )
    run(ip, "look around")
    listener.close()  # wakes the accept if nothing connected
    waiter.join()

    outputs = _outputs(store, magics)
    assert [status for status, _ in outputs] == ["completed"] * 4
    assert "envdone" in outputs[0][1] and "PATH=" in outputs[0][1]
    assert "readdone" in outputs[2][1]
    assert "rc=1" in outputs[3][1] and "Operation not permitted" in outputs[3][1]
    assert reached == []
    wire = sent(server)
    for mark in (*MARKS, "KERNELHMACSECRET", "JPSERVERTOKENSECRET", "GITCFGSECRET"):
        assert mark not in wire
    for mark in ("CARGOSECRET", "HISTORYSECRET"):
        assert mark not in wire


def test_secret_formats_in_output_are_redacted(ip, server, store, magics, sandboxed):
    """Formats a name cannot reveal: written to a file, printed by a command."""
    lines = [
        *SECRETS.values(),
        "Server=tcp:db.example.net;Database=d;User ID=u;Password=SQLPASSSECRET1;",
        "https://discord.com/api/webhooks/123456789012345678/DISCORDHOOKSECRETabcdefgh",
        "Authorization: Basic QkFTSUNBVVRIU0VDUkVUOnBhc3N3b3Jk",
        "aws_secret_access_key = AWSFILESECRETabcdefghijklmnopqrstuvwxyz0",
        "x-api-key: HEADERKEYSECRET0123",
        "tls.key: LS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0t",
        "Ck1JSUV2UUlCQURBTkJna3Foa2lHOXcwQkFRRUZBQVNDQktjd2dnU2pBZ0VBQW9JQkFRQ0JBU0U2NFNFQ1JFVA==",
        "gsk_GROQSECRETabcdefghijklmnopqrstuvwxyz0123456789",
        "r8_REPLICATESECRETabcdefghijklmnopqrstu",
    ]
    (sandboxed.parent / "proj" / "notes.txt").write_text("\n".join(lines) + "\n")
    bash(server, "cat notes.txt; pwd")
    run(ip, "show the notes")
    status, output = _outputs(store, magics)[-1]
    assert status == "completed"
    assert "Database=d;User ID=u;" in output and "/proj" in output  # the rest is kept
    wire = sent(server) + json.dumps(output)
    marks = ("SQLPASSSECRET1", "DISCORDHOOKSECRET", "QkFTSUNBVVRIU0VDUkVU", "AWSFILESECRET")
    marks += ("HEADERKEYSECRET", "Ck1JSUV2UUlCQURBTkJna3Fo", "GROQSECRET", "REPLICATESECRET")
    for mark in (*MARKS, *marks):
        assert mark not in wire


def test_code_that_runs_later_outside_stays_read_only(ip, server, store, magics, area, monkeypatch):
    """The notebook in the home folder: a command may write its ordinary subfolders, but not
    what the user's next shell, kernel, Python or git command runs unconfined (dot-files,
    IPython startup files, ``site-packages``, a repository's ``.git``)."""
    from jupyter_session_agent.tools.sandbox import status

    found = status()
    if not found.available:
        import pytest

        pytest.skip(found.reason)
    home = area / "home"
    (home / ".ipython/profile_default/startup").mkdir(parents=True)
    (home / ".bashrc").write_text("ORIGINAL\n")
    (home / "data").mkdir()
    (home / "repo/.git/hooks").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(home)
    magics.sandbox = "auto"
    magics.permission = {}
    bash(
        server,
        "echo made > data/out.txt; cat data/out.txt",
        "echo PWNED >> ~/.bashrc; echo 'import os' > ~/.ipython/profile_default/startup/0.py;"
        " mkdir -p ~/.local/lib && touch ~/.local/lib/x.pth; echo x > ~/.profile;"
        " echo PWNED > repo/.git/hooks/pre-commit; echo PWNED > repo/.git/config; echo end",
    )
    run(ip, "write")
    outputs = _outputs(store, magics)
    assert [s for s, _ in outputs] == ["completed", "completed"]
    assert (home / "data/out.txt").read_text() == "made\n"
    assert "end" in outputs[1][1] and "Read-only file system" in outputs[1][1]
    assert (home / ".bashrc").read_text() == "ORIGINAL\n"
    assert not (home / ".profile").exists()
    assert not list((home / ".ipython/profile_default/startup").iterdir())
    assert not (home / ".local").exists()
    assert not list((home / "repo/.git/hooks").iterdir())
    assert not (home / "repo/.git/config").exists()
