"""The history's Parquet files ("segments"): typed, deduplicated, sorted, self-describing.

Every file the store writes holds the raw and the typed columns of ``schema.py`` (merged files
also the derived ``step`` and ``tool_call`` rows), the newest revision of each id it holds
(tombstones included: a tombstone must still hide older revisions elsewhere), sorted by kind,
session and id so that min/max statistics skip the row groups of other kinds and sessions. Its
footer carries ``{"jupyter_session_agent": {"format": 2, "level": 0|1, …}}`` (merge.py reads the
generation of a merged file from it). A file is written under a hidden temporary name, fsynced,
and renamed into place, so a reader never sees half of one.

A Parquet file without that key (written by an earlier version: raw columns only, or dropped in
by hand) is read as raw rows and typed when read.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..core.messages import now_ms
from .schema import LAYOUT, quote, read_json_sql, typed

META_KEY = "jupyter_session_agent"
FORMAT = 2
ORDER = "kind, session_id, id"


def connect(memory_limit: str | None = None, temp: Path | None = None):
    """A private in-memory DuckDB for writing segments (offline settings)."""
    import duckdb

    config: dict[str, str | bool | int | float | list[str]] = {
        "autoinstall_known_extensions": "false",
        "autoload_known_extensions": "false",
        "preserve_insertion_order": "false",
    }
    if memory_limit:
        config["memory_limit"] = memory_limit
    if temp is not None:
        config["temp_directory"] = str(temp)
    con = duckdb.connect(config=config)
    con.execute("SET enable_progress_bar=false")
    return con


def copy(con, select: str, path: Path, meta: dict, params: list | None = None) -> int:
    """Write the rows of ``select`` to ``path`` (fsynced, not yet visible if the name is hidden)."""
    meta = {"format": FORMAT, "layout": LAYOUT, **meta}
    options = f"FORMAT parquet, KV_METADATA {{{META_KEY}: {quote(json.dumps(meta))}}}"
    rows = con.execute(f"COPY ({select}) TO {quote(path)} ({options})", params or []).fetchone()[0]
    with open(path, "rb") as f:
        os.fsync(f.fileno())
    return rows


def read_meta(con, path: str) -> dict | None:
    """The file's ``jupyter_session_agent`` footer entry, or None (an older or foreign file)."""
    rows = con.execute(
        f"SELECT decode(value) FROM parquet_kv_metadata({quote(path)}) "
        f"WHERE decode(key) = '{META_KEY}'"
    ).fetchall()
    if not rows:
        return None
    try:
        meta = json.loads(rows[0][0])
    except ValueError:
        return None
    return meta if isinstance(meta, dict) and meta.get("format") == FORMAT else None


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def stat_key(path: str) -> tuple | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def parquet_problem(path: str) -> str | None:
    """Why ``path`` is not a whole Parquet file ("gone" if it vanished), or None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        return "gone"
    except OSError as err:
        return os.strerror(err.errno or 0)
    try:
        size = os.fstat(fd).st_size
        if size < 12:
            return f"{size} bytes: too small to be a Parquet file"
        if os.pread(fd, 4, 0) != b"PAR1" or os.pread(fd, 4, size - 4) != b"PAR1":
            return "not a whole Parquet file: an interrupted copy or sync?"
        return None
    except OSError as err:
        return os.strerror(err.errno or 0)
    finally:
        os.close(fd)


def journal_to_parquet(journal: Path, history: Path) -> None:
    """Journal → ``parquet/<writer>.parquet`` (typed, tmp + rename), then remove the journal.

    Only for a finished writer (the caller holds the journal's lock): keeps the newest row per
    id and turns its pending/running tools into interrupted errors. Readers may list both files
    for a moment; they read only the Parquet file then (same name), and a merge leaves a
    Parquet file alone while its journal exists.
    """
    out_dir = history / "parquet"
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / f".{journal.stem}.parquet.tmp"
    con = connect()
    try:
        # Older revisions in one journal can never win, so only the newest per id is kept.
        # Its writer is finished, so its unfinished tools were interrupted: settle them here too.
        raw = (
            f"SELECT * REPLACE ({_SETTLED} AS data) FROM {read_json_sql([journal])} "
            "WHERE id IS NOT NULL "
            "QUALIFY row_number() OVER (PARTITION BY id ORDER BY rev DESC) = 1"
        )
        rows = copy(con, f"{typed(raw)} ORDER BY {ORDER}", tmp, {"level": 0}, [now_ms()])
    finally:
        con.close()
    if rows:
        os.rename(tmp, out_dir / f"{journal.stem}.parquet")
        fsync_dir(out_dir)
    else:
        tmp.unlink(missing_ok=True)
    journal.unlink()


# A pending/running tool part rewritten as the interrupted ToolError messages() would show ($1 = now).
_SETTLED = """CASE WHEN kind = 'part' AND data->>'type' = 'tool' AND data->'state'->>'status' IN ('pending', 'running')
    THEN json_merge_patch(json_merge_patch(data, '{"state": null}'), json_object('state', json_object(
        'status', 'error', 'input', coalesce(data->'state'->'input', '{}'::JSON),
        'error', 'Tool execution was interrupted',
        'time', json_object('start', coalesce(TRY_CAST(data->'state'->'time'->>'start' AS BIGINT), $1), 'end', $1),
        'metadata', json_merge_patch(coalesce(data->'state'->'metadata', '{}'::JSON), '{"interrupted": true}'))))
    ELSE data END"""
