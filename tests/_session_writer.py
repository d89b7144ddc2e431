"""Another kernel continuing a session, for the two-kernel tests (tests/test_harden_store.py).

Usage::

    python _session_writer.py DATA_DIR SESSION_ID PROMPT

Opens the session through the session API (its own Store on DATA_DIR, as a second kernel
would), prints ``opened``, runs one turn with PROMPT against the OpenAI-compatible server of
``OPENAI_BASE_URL`` (model ``openai/scripted``), prints ``done <final text>`` and exits (its
journal is compacted at exit, as a finished kernel's).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jupyter_session_agent.core.settings import Settings  # noqa: E402
from jupyter_session_agent.session.agent_session import AgentSession  # noqa: E402
from jupyter_session_agent.store import Store  # noqa: E402


def main(data_dir: str, session_id: str, prompt: str) -> None:
    settings = Settings(
        model="openai/scripted",
        data_dir=Path(data_dir),
        titles=False,
        max_retries=0,
        permission={"*": "allow"},
        snapshot={"enabled": False},
        model_overrides={"openai/scripted": {"context": 100_000, "output": 4_096}},
    )
    store = Store(data_dir)
    session = AgentSession.open(session_id, settings, store=store)
    print("opened", flush=True)
    result = session.prompt(prompt)
    print("done", result.text, flush=True)
    store.close()


if __name__ == "__main__":
    main(*sys.argv[1:])
