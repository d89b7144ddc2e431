"""Command line: ``python -m jupyter_session_agent quickstart | sql QUERY | stop-local |
export-parquet DIR | export-duckdb FILE``.

``quickstart`` is the main job of the README: it executes
``notebooks/01_quickstart.ipynb`` in a fresh kernel (on the embedded local
model unless ``OPENAI_API_KEY``/``OPENAI_BASE_URL`` say otherwise), saves the
executed notebook, prints what the cells tagged ``quickstart-show`` showed (the
model's answer, the variable its code defined), and says where the notebook and
the history are. It says what it does before it starts; the kernel's own
messages go to ``<out>/kernel.log``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shlex
import sys
import time
from pathlib import Path

from .. import analytics
from .. import sql as run_sql
from ..core.errors import AgentError
from ..core.settings import Settings, resolve_data_dir
from ..providers.local import CATALOGUE, CLIENT_GRACE, running_servers, stop_server
from ..providers.registry import default_spec
from .commands.analytics import describe_duckdb_export

REPO_NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


def quickstart(out_dir: Path, timeout: int) -> Path:
    import nbformat
    from nbclient import NotebookClient

    source = REPO_NOTEBOOKS / "01_quickstart.ipynb"
    if not source.exists():
        raise AgentError(f"{source} not found — run this from a checkout of the repository")
    notebook = nbformat.read(source, as_version=4)
    print(f"running {source.name} in a fresh kernel on {_model_line()} …", flush=True)
    started = time.monotonic()
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / "01_quickstart.executed.ipynb"
    with open(out_dir / "kernel.log", "w") as kernel_log:
        client = NotebookClient(
            notebook,
            timeout=timeout,
            kernel_name="python3",
            resources={"metadata": {"path": str(REPO_NOTEBOOKS)}},
        )
        try:
            client.execute(stderr=kernel_log, stdout=kernel_log)
        finally:
            nbformat.write(notebook, target)
    elapsed = time.monotonic() - started
    data_dir = resolve_data_dir()
    for line in shown(notebook):
        print(f"  {line}")
    print(f"executed {source.name} in {elapsed:.1f} s")
    print(f"  executed notebook: {target.resolve()}")
    print(f"  history (DuckDB over JSONL journals): {data_dir / 'history'}")
    python = sys.executable
    print(
        f'  query it:  {python} -m jupyter_session_agent sql "select type, count(*) from part group by type"'
    )
    print(f"  open it:   {open_command(python, target.resolve())}")
    if running_servers():
        print(
            f"  the local model server stops by itself about {CLIENT_GRACE:.0f} s after its last kernel "
            f"(or after 10 idle minutes); now: {python} -m jupyter_session_agent stop-local"
        )
    return target


def _model_line() -> str:
    model = default_spec(Settings())
    if model.startswith("local/"):
        known = CATALOGUE.get(model.partition("/")[2])
        title = known.title.rsplit(" ", 1)[0] if known else model
        return (
            f"the embedded local model ({title}, no API key; its server starts on the first turn)"
        )
    if model.startswith(("ollama/", "lmstudio/")):
        return f"{model} (no API key; a local server answers on its usual port)"
    return f"{model} (OPENAI_API_KEY / OPENAI_BASE_URL are set)"


def shown(notebook) -> list[str]:
    """The text outputs of the cells tagged ``quickstart-show``, one line each."""
    lines = []
    for cell in notebook.cells:
        if "quickstart-show" not in cell.get("metadata", {}).get("tags", ()):
            continue
        for output in cell.get("outputs", ()):
            text = output.get("text") or (output.get("data") or {}).get("text/plain") or ""
            if output.get("output_type") == "error":
                text = f"{output.get('ename')}: {output.get('evalue')}"
            text = " ".join(str(text).split())
            if text:
                first = cell.source.splitlines()[0] if cell.source else ""
                lines.append(f"{first}  →  {text[:200]}")
    return lines


def open_command(python: str, notebook: Path) -> str:
    """The command that opens ``notebook`` in JupyterLab from here: it installs JupyterLab only
    when it is missing, and adds ``--allow-root`` for root (JupyterLab refuses to start as root
    without it)."""
    python = shlex.quote(python)
    lab = f"{python} -m jupyterlab"
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        lab += " --allow-root"
    lab += f" {shlex.quote(str(notebook))}"
    if importlib.util.find_spec("jupyterlab") is None:
        return f"{python} -m pip install jupyterlab && {lab}"
    return lab


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="jupyter-session-agent")
    sub = parser.add_subparsers(dest="command", required=True)
    qs = sub.add_parser("quickstart", help="run notebooks/01_quickstart.ipynb and save the result")
    qs.add_argument("--out", default="artifacts", help="where to write the executed notebook")
    qs.add_argument("--timeout", type=int, default=900, help="seconds per cell")
    sql = sub.add_parser("sql", help="read-only SQL over the history")
    sql.add_argument("query")
    sub.add_parser("stop-local", help="stop the embedded local model server")
    ep = sub.add_parser(
        "export-parquet",
        help="write the history as date-partitioned Parquet for "
        "Spark/Trino/DuckDB (incremental: only changed days; for a cron job)",
    )
    ep.add_argument("directory")
    ep.add_argument("--user", help="the user column (default: this login)")
    ed = sub.add_parser(
        "export-duckdb", help="write the history and its views into a DuckDB file (incremental)"
    )
    ed.add_argument("file")
    args = parser.parse_args(argv)
    try:
        if args.command == "quickstart":
            quickstart(Path(args.out), args.timeout)
        elif args.command == "sql":
            print(run_sql(args.query).to_string(index=False))
        elif args.command in ("export-parquet", "export-duckdb"):
            if args.command == "export-parquet":
                counts = analytics.export_parquet(args.directory, user=args.user)
                written = ", ".join(f"{n:,} {table}" for table, n in counts.items() if n)
                print(f"exported {written or 'nothing new'} to {args.directory}")
            else:
                print(describe_duckdb_export(args.file, analytics.export_duckdb(args.file)))
        elif args.command == "stop-local":
            stopped = stop_server()
            print(
                "stopped the local model server" if stopped else "no local model server was running"
            )
    except AgentError as err:
        print(f"{type(err).__name__}: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
