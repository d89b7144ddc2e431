"""The contract: importing the package and loading the extension stay cheap."""

from __future__ import annotations

import subprocess
import sys

HEAVY = (
    "openai",
    "duckdb",
    "pandas",
    "ipywidgets",
    "anywidget",
    "genai_prices",
    "httpx",
    "httpx2",
    "matplotlib",
)


def _loaded_after(code: str) -> set[str]:
    probe = code + "\nimport sys\nprint(','.join(m for m in %r if m in sys.modules))" % (HEAVY,)
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return {m for m in out.stdout.strip().split(",") if m}


def test_import_loads_nothing_heavy():
    assert _loaded_after("import jupyter_session_agent") == set()


def test_load_ext_loads_nothing_heavy():
    code = (
        "from IPython.core.interactiveshell import InteractiveShell\n"
        "ip = InteractiveShell.instance()\n"
        "ip.run_line_magic('load_ext', 'jupyter_session_agent')\n"
        "assert 'agent' in ip.magics_manager.magics['cell']\n"
    )
    assert _loaded_after(code) == set()
