"""The command line: ``python -m jupyter_session_agent sql | stop-local`` (``quickstart`` is the
README's main job; it runs the quickstart notebook, which nbval covers)."""

from __future__ import annotations

from jupyter_session_agent.ui.cli import main


def test_sql_and_stop_local(data_dir, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv(
        "JUPYTER_SESSION_AGENT_RUN_DIR", str(tmp_path / "run")
    )  # not the user's servers
    assert main(["sql", "select count(*) as n from session"]) == 0
    assert "n" in capsys.readouterr().out
    assert main(["stop-local"]) == 0
    assert capsys.readouterr().out.strip() == "no local model server was running"


def test_errors_are_one_line_and_exit_1(data_dir, capsys):
    assert main(["sql", "drop table part"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("ReadOnlyError:") and "\n" not in err
