"""The scripted OpenAI-compatible server (real HTTP and SSE on loopback) for tests,
demos and fault injection: ``python -m jupyter_session_agent.testing.scripted_server``.

The nbval sanitizer for agent notebooks replayed from a record (docs/replay.md) is
:data:`NBVAL_SANITIZE`: ``pytest --nbval --nbval-sanitize-with <that path>``.
"""

from pathlib import Path

#: nbval's ``--nbval-sanitize-with`` file: what legitimately differs between a recorded and a
#: replayed agent notebook (ids, times, timings, the record/replay line), nothing else.
NBVAL_SANITIZE = Path(__file__).with_name("nbval-sanitize.cfg")
