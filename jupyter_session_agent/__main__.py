"""Command line: ``python -m jupyter_session_agent quickstart | sql QUERY | stop-local``.

``quickstart`` is the main job of the README: it executes
``notebooks/01_quickstart.ipynb`` in a fresh kernel (on the embedded local
model unless ``OPENAI_API_KEY``/``OPENAI_BASE_URL`` say otherwise), saves the
executed notebook, and says where it and the history are.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from .errors import AgentError

REPO_NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def quickstart(out_dir: Path, timeout: int) -> Path:
    import nbformat
    from nbclient import NotebookClient

    from .settings import resolve_data_dir

    source = REPO_NOTEBOOKS / "01_quickstart.ipynb"
    if not source.exists():
        raise AgentError(f"{source} not found — run this from a checkout of the repository")
    notebook = nbformat.read(source, as_version=4)
    started = time.monotonic()
    NotebookClient(notebook, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(REPO_NOTEBOOKS)}}).execute()
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / "01_quickstart.executed.ipynb"
    nbformat.write(notebook, target)
    elapsed = time.monotonic() - started
    data_dir = resolve_data_dir()
    print(f"executed {source.name} in {elapsed:.1f} s")
    print(f"  executed notebook: {target.resolve()}")
    print(f"  history (DuckDB over JSONL journals): {data_dir / 'history'}")
    python = sys.executable
    print(f"  query it:  {python} -m jupyter_session_agent sql \"select type, count(*) from part group by type\"")
    print(f"  open it:   {python} -m pip install jupyterlab && {python} -m jupyterlab {target.resolve()}")
    from .local import LocalServer

    if LocalServer(data_dir).status() is not None:
        print(f"  the local model server keeps running for your other kernels; stop it with: "
              f"{python} -m jupyter_session_agent stop-local")
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="jupyter-session-agent")
    sub = parser.add_subparsers(dest="command", required=True)
    qs = sub.add_parser("quickstart", help="run notebooks/01_quickstart.ipynb and save the result")
    qs.add_argument("--out", default="artifacts", help="where to write the executed notebook")
    qs.add_argument("--timeout", type=int, default=900, help="seconds per cell")
    sql = sub.add_parser("sql", help="read-only SQL over the history")
    sql.add_argument("query")
    sub.add_parser("stop-local", help="stop the embedded local model server")
    args = parser.parse_args(argv)
    try:
        if args.command == "quickstart":
            quickstart(Path(args.out), args.timeout)
        elif args.command == "sql":
            from . import sql as run_sql

            print(run_sql(args.query).to_string(index=False))
        elif args.command == "stop-local":
            from .local import stop_server
            from .settings import resolve_data_dir

            stopped = stop_server(resolve_data_dir())
            print("stopped the local model server" if stopped else "no local model server was running")
    except AgentError as err:
        print(f"{type(err).__name__}: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
