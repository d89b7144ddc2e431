"""The read-only guard of ``Store.sql()``: only SELECT (and EXPLAIN of one) gets through."""

from __future__ import annotations

import re

from ..core.errors import ReadOnlyError, UsageError
from .problems import one_line

# Table functions that change state or write files although they run inside a SELECT.
_UNSAFE_FUNCTIONS = re.compile(
    r"\b(enable_logging|disable_logging|truncate_duckdb_logs|enable_profiling|disable_profiling|"
    r"(force_)?checkpoint|json_execute_serialized_sql|\w*external_resource\w*|\w*grammar_extension|"
    r"python_map_function)\s*\(",
    re.IGNORECASE,
)
_EXPLAIN = re.compile(r"^\s*EXPLAIN(\s+ANALY[SZ]E)?\s+", re.IGNORECASE)


def check_read_only(con, query: str) -> None:
    """Raise unless every statement only reads (SELECT, or EXPLAIN of a SELECT)."""
    import duckdb

    try:
        statements = con.extract_statements(query)
    except duckdb.ParserException as err:
        raise UsageError(one_line(err)) from None
    except ValueError:  # a statement type this duckdb build cannot even name
        raise ReadOnlyError("sql() is read-only — only SELECT queries are allowed") from None
    if not statements:
        raise UsageError("empty query — try: SELECT * FROM session")
    for statement in statements:
        kind = statement.type
        if kind == duckdb.StatementType.EXPLAIN:
            inner = _EXPLAIN.sub("", statement.query, count=1)
            if inner == statement.query:
                raise ReadOnlyError("sql() is read-only — use EXPLAIN [ANALYZE] SELECT …")
            check_read_only(con, inner)
        elif kind != duckdb.StatementType.SELECT:
            raise ReadOnlyError(
                f"sql() is read-only: {kind.name} is not allowed — only SELECT "
                "(copy rows into your own duckdb.connect() to change them)"
            )
    match = _UNSAFE_FUNCTIONS.search(query)
    if match:
        raise ReadOnlyError(f"sql() is read-only: {match.group(1)}() is not allowed")
