"""The contract: importing the package and loading the extension stay cheap."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("openai", "duckdb", "pandas", "ipywidgets", "anywidget", "genai_prices", "httpx", "httpx2", "matplotlib")


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


def test_only_the_store_imports_duckdb_and_only_the_provider_imports_openai():
    import pathlib
    import re

    package = pathlib.Path(__file__).resolve().parents[1] / "jupyter_session_agent"
    owners = {"duckdb": lambda rel: rel.parts[0] == "store", "openai": lambda rel: rel.name == "provider.py"}
    for path in package.rglob("*.py"):
        text = path.read_text()
        rel = path.relative_to(package)
        for module, allowed in owners.items():
            if re.search(rf"^\s*(import {module}\b|from {module}\b)", text, re.M):
                assert allowed(rel), f"{rel} imports {module}"
