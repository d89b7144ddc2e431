"""nbval for agent notebooks: ``pytest --nbval -p jupyter_session_agent.testing.nbval_json``.

nbval compares a JSON output (a MIME type ending in ``+json``, such as the transcript's
``application/vnd.jupyter.session-agent+json``) as a Python object, so its
``--nbval-sanitize-with`` patterns never apply to it and every id or time in it is a difference.
This plugin makes nbval sanitize such a value as its JSON text (keys sorted), the same patterns
as every other output. ``python -m jupyter_session_agent.testing.nbval_json`` prints the path
of the shipped sanitizer (:data:`~jupyter_session_agent.testing.NBVAL_SANITIZE`, docs/replay.md).
"""

from __future__ import annotations

import json
from typing import Any


def pytest_configure(config: Any) -> None:
    try:
        from nbval.plugin import IPyNbCell
    except ImportError:  # nbval is not installed: nothing to extend
        return
    original = IPyNbCell.sanitize
    if getattr(original, "json_text", False):
        return

    def sanitize(self: Any, value: Any) -> Any:
        if isinstance(value, (dict, list)):
            value = json.dumps(value, sort_keys=True, indent=1, ensure_ascii=False)
        return original(self, value)

    sanitize.json_text = True  # type: ignore[attr-defined]
    IPyNbCell.sanitize = sanitize


if __name__ == "__main__":
    from . import NBVAL_SANITIZE

    print(NBVAL_SANITIZE)
