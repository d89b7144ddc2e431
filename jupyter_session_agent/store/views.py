"""The views: ``_store.<kind>`` over a read's plan (the current generation's files scanned in
place, the tail's tables) and the public views (docs/analytics.md) over those, plain SQL.

``_store.<kind>`` is defined again whenever the plan changes (a new generation, a session of
the base taken over by the tail); the public views read only ``_store.*``, so they are defined
once per connection.
"""

from __future__ import annotations

from .generation import Plan
from .schema import DERIVED, EMPTY_RELATION, KINDS, SESSION_KEY, derived, quote, select_list, typed


def _latest(kind: str) -> str:
    """Newest revision per id of one kind, tombstones removed: ``_store.<kind>``.

    Ends in a WHERE clause so a view can go on with ``AND …``.
    """
    return f"(SELECT *, false AS deleted FROM _store.{kind}) WHERE deleted IS NOT TRUE"


def _num(path: str, typ: str = "BIGINT") -> str:
    return f"TRY_CAST(data{path} AS {typ})"


VIEWS = {
    "session": """SELECT id, project_id, workspace_id, parent_id, slug, directory, title, version, time_created,
        time_updated, time_archived, data FROM _store.session""",
    "message": """SELECT id, session_id, time_created, time_updated, data, role, parent_id, agent, provider_id,
        model_id, cost, finish, summary, error_name, time_completed, input_tokens, output_tokens, reasoning_tokens,
        cache_read_tokens, cache_write_tokens, total_tokens, tokens_estimated, mode, error_message
        FROM _store.message""",
    "part": """SELECT id, message_id, session_id, time_created, time_updated, data, type, tool, call_id, status,
        title, text_length, output_length, time_start, time_end, compacted_at, reason, cost, input_tokens,
        output_tokens, reasoning_tokens, cache_read_tokens, cache_write_tokens, total_tokens, tokens_estimated,
        latency_ms, first_token_ms, attempts, error, interrupted, auto, overflow, attempt, synthetic
        FROM _store.part""",
    # Cost rollup per session (lifecycle.md): its assistant messages, its title call
    # (data.titleUsage.cost), its other model calls (llm_call events: memory extraction) and,
    # recursively, its subagent sessions (parent_id). UNION, not
    # UNION ALL, so an imported parent cycle cannot recurse forever.
    "session_cost": """WITH RECURSIVE tree(root, id) AS (
            SELECT id, id FROM session
            UNION SELECT tree.root, s.id FROM tree JOIN session s ON s.parent_id = tree.id),
        msg AS (SELECT session_id, sum(cost) cost, count(*) n FROM message WHERE role = 'assistant'
                GROUP BY session_id),
        calls AS (SELECT session_id, sum(TRY_CAST(data->>'cost' AS DOUBLE)) cost FROM _store.event
                WHERE data->>'type' = 'llm_call' GROUP BY session_id),
        own AS (SELECT s.id, s.parent_id, coalesce(msg.cost, 0) messages_cost, coalesce(msg.n, 0) llm_messages,
                coalesce(TRY_CAST(s.data->'titleUsage'->>'cost' AS DOUBLE), 0) title_cost,
                coalesce(calls.cost, 0) calls_cost
                FROM session s LEFT JOIN msg ON msg.session_id = s.id LEFT JOIN calls ON calls.session_id = s.id)
        SELECT o.id session_id, any_value(o.parent_id) parent_id, any_value(o.messages_cost) messages_cost,
            any_value(o.title_cost) title_cost, any_value(o.calls_cost) calls_cost,
            any_value(o.messages_cost + o.title_cost + o.calls_cost) own_cost,
            sum(d.messages_cost + d.title_cost + d.calls_cost)
                - any_value(o.messages_cost + o.title_cost + o.calls_cost) children_cost,
            sum(d.messages_cost + d.title_cost + d.calls_cost) total_cost, count(*) - 1 descendants
        FROM own o JOIN tree t ON t.root = o.id JOIN own d ON d.id = t.id GROUP BY o.id""",
}

# Compaction events (compaction.CompactionEvent, journal kind "event"): one row per prune or summary.
VIEWS["compaction_event"] = f"""SELECT id, session_id, time_created, data->>'kind' kind,
    data->>'cause' cause, data->>'outcome' outcome, {_num("->>'tokensBefore'")} tokens_before,
    {_num("->>'tokensAfter'")} tokens_after,
    {_num("->>'tokensBefore'")} - {_num("->>'tokensAfter'")} tokens_freed,
    {_num("->>'usable'")} usable, {_num("->>'trigger'")} trigger, {_num("->>'stepTokens'")} step_tokens,
    {_num("->>'partsPruned'")} parts_pruned, {_num("->>'tokensPruned'")} tokens_pruned,
    {_num("->>'headMessages'")} head_messages, {_num("->>'headTokens'")} head_tokens,
    {_num("->>'tailMessages'")} tail_messages, {_num("->>'tailTokens'")} tail_tokens,
    {_num("->>'summaryTokens'")} summary_tokens, {_num("->>'summaryInputTokens'")} summary_input_tokens,
    {_num("->>'summaryOutputTokens'")} summary_output_tokens, {_num("->>'llmCalls'")} llm_calls,
    {_num("->>'durationMs'")} duration_ms, {_num("->>'cost'", "DOUBLE")} cost,
    data->>'summaryInput' summary_input, data->>'model' model, data->>'requestId' request_id,
    data->>'summaryId' summary_id, data->>'tailStartId' tail_start_id, data->>'error' error,
    data->>'source' source, data
    FROM {_latest("event")} AND data->>'type' = 'compaction'"""

# Compaction replays (analytics.replay.ReplayRow, journal kind "event", type "compaction_replay"):
# one row per recorded step per replay run, the recorded tokens beside the replayed ones.
VIEWS["compaction_replay"] = f"""SELECT data->>'replayID' replay_id, session_id,
    {_num("->>'step'")} step, {_num("->>'turn'")} turn, data->>'messageID' message_id,
    data->'policy'->>'name' policy_name, data->'policy' policy,
    {_num("->>'recordedTokens'")} recorded_tokens, {_num("->>'replayTokens'")} replay_tokens,
    data->>'recordedAction' recorded_action, data->>'action' action, data->>'outcome' outcome,
    {_num("->>'tokensBefore'")} tokens_before, {_num("->>'tokensAfter'")} tokens_after,
    {_num("->>'partsPruned'")} parts_pruned, {_num("->>'tokensPruned'")} tokens_pruned,
    {_num("->>'llmCalls'")} llm_calls, {_num("->>'summaryInputTokens'")} summary_input_tokens,
    {_num("->>'summaryTokens'")} summary_tokens, data->>'summarySource' summary_source,
    {_num("->>'usable'")} usable, {_num("->>'trigger'")} trigger,
    {_num("->'time'->>'created'")} time_created, id
    FROM {_latest("event")} AND data->>'type' = 'compaction_replay'"""

# Todo lists imported from OpenCode (opencode_import.TodoList, journal kind "event", type "todos":
# one list per session, the latest import wins): one row per item, in the list's order.
VIEWS["todo"] = f"""SELECT session_id, TRY_CAST(item->>'position' AS INTEGER) AS position,
    item->>'content' AS content, item->>'status' AS status, item->>'priority' AS priority,
    TRY_CAST(item->'time'->>'created' AS BIGINT) AS time_created,
    TRY_CAST(item->'time'->>'updated' AS BIGINT) AS time_updated, source
    FROM (SELECT session_id, data->>'source' AS source, unnest(CAST(data->'items' AS JSON[])) AS item
          FROM {_latest("event")} AND data->>'type' = 'todos')"""

# Rules files a session's first turn added to the system prompt (context.rules.RulesUsed, journal
# kind "event", type "rules"): one row per file found, used or not (and why).
VIEWS["rules_file"] = f"""SELECT session_id, time_created, f->>'path' AS path,
    TRY_CAST(f->>'used' AS BOOLEAN) AS used, TRY_CAST(f->>'bytes' AS BIGINT) AS bytes,
    nullif(f->>'note', '') AS note
    FROM (SELECT session_id, time_created, unnest(CAST(data->'files' AS JSON[])) AS f
          FROM {_latest("event")} AND data->>'type' = 'rules')"""

# Analytics views (docs/analytics.md): one row per LLM call, tool call, session, and day × model.
# Plain SQL over the views above; times are UTC TIMESTAMPs; costs in USD.
_UTC = "make_timestamp({} * 1000)"  # epoch milliseconds → TIMESTAMP (UTC)
VIEWS["step"] = "SELECT * FROM _store.step"  # rows derived from parts (schema.derived)
VIEWS["tool_call"] = "SELECT * FROM _store.tool_call"
VIEWS["session_totals"] = "SELECT * FROM _store.session_totals"  # kept up to date (schema.py)
# What an imported session's own row recorded (OpenCode keeps totals on the session), shown only
# where it differs from what its messages add up to (NULL otherwise, and for our sessions).
_RECORDED = ",\n        ".join(
    f"CASE WHEN {value} IS NOT NULL AND abs({value} - coalesce({ours}, 0)) > {eps} THEN {value} END "
    f"AS recorded_{name}"
    for name, value, ours, eps in [
        ("cost", "TRY_CAST(s.data->>'cost' AS DOUBLE)", "sc.messages_cost", "1e-9"),
        *(
            (f"{n}_tokens", f"TRY_CAST(s.data->'tokens'->{path} AS BIGINT)", f"st.{n}_tokens", "0")
            for n, path in (
                ("input", "'input'"),
                ("output", "'output'"),
                ("reasoning", "'reasoning'"),
                ("cache_read", "'cache'->'read'"),
                ("cache_write", "'cache'->'write'"),
            )
        ),
    ]
)
VIEWS["session_summary"] = f"""WITH
    steps AS (SELECT session_id, count(*) steps, arg_max(model, id) model, arg_max(provider, id) provider,
        sum(input_tokens)::BIGINT input_tokens, sum(output_tokens)::BIGINT output_tokens,
        sum(reasoning_tokens)::BIGINT reasoning_tokens,
        sum(cache_read_tokens)::BIGINT cache_read_tokens, sum(cache_write_tokens)::BIGINT cache_write_tokens,
        max(context_tokens) max_context_tokens, sum(cost) FILTER (WHERE summary) summary_cost
        FROM step GROUP BY session_id),
    msgs AS (SELECT session_id, count(*) FILTER (WHERE error_name IS NOT NULL) errors,
        max(time_created) last_message FROM message GROUP BY session_id),
    turns AS (SELECT m.session_id, count(DISTINCT m.id) turns FROM message m JOIN part p ON p.message_id = m.id
        WHERE m.role = 'user' AND p.type = 'text' AND NOT coalesce(p.synthetic, false) GROUP BY m.session_id),
    tools AS (SELECT session_id, count(*) tool_calls,
        count(*) FILTER (WHERE failed) tool_errors FROM tool_call GROUP BY session_id),
    compactions AS (SELECT session_id, count(*) FILTER (WHERE kind = 'summary' AND outcome = 'ok') compactions,
        count(*) FILTER (WHERE kind = 'prune') prunes FROM compaction_event GROUP BY session_id)
    SELECT s.id AS session_id, s.title, s.parent_id, s.directory, st.model, st.provider,
        coalesce(turns.turns, 0) AS turns, coalesce(st.steps, 0) AS steps,
        coalesce(tools.tool_calls, 0) AS tool_calls, coalesce(tools.tool_errors, 0) AS tool_errors,
        coalesce(msgs.errors, 0) AS errors, coalesce(c.compactions, 0) AS compactions,
        coalesce(c.prunes, 0) AS prunes, coalesce(st.input_tokens, 0) AS input_tokens,
        coalesce(st.output_tokens, 0) AS output_tokens, coalesce(st.reasoning_tokens, 0) AS reasoning_tokens,
        coalesce(st.cache_read_tokens, 0) AS cache_read_tokens,
        coalesce(st.cache_write_tokens, 0) AS cache_write_tokens, st.max_context_tokens,
        sc.messages_cost - coalesce(st.summary_cost, 0) AS cost, coalesce(st.summary_cost, 0) AS summary_cost,
        sc.title_cost, sc.calls_cost, sc.children_cost AS subagent_cost, sc.total_cost,
        sc.descendants AS subagents,
        {_RECORDED},
        {_UTC.format("s.time_created")} AS time_created,
        {_UTC.format("greatest(s.time_updated, msgs.last_message)")} AS time_updated
    FROM session s JOIN session_cost sc ON sc.session_id = s.id
    LEFT JOIN steps st ON st.session_id = s.id LEFT JOIN msgs ON msgs.session_id = s.id
    LEFT JOIN turns ON turns.session_id = s.id LEFT JOIN tools ON tools.session_id = s.id
    LEFT JOIN compactions c ON c.session_id = s.id"""
# Model calls beside a turn (providers.base.ModelCall, journal kind "event", type "llm_call":
# memory extraction, ...), one row each, with the title calls (kept on their session, titleUsage).
_TOK = "TRY_CAST(data->'tokens'{} AS BIGINT)"
VIEWS["llm_call"] = f"""SELECT id, session_id, data->>'purpose' AS purpose,
        split_part(data->>'model', '/', 1) AS provider,
        substr(data->>'model', length(split_part(data->>'model', '/', 1)) + 2) AS model,
        {_UTC.format("time_created")} AS time, {_TOK.format("->>'input'")} AS input_tokens,
        {_TOK.format("->>'output'")} AS output_tokens, {_TOK.format("->>'reasoning'")} AS reasoning_tokens,
        {_TOK.format("->'cache'->>'read'")} AS cache_read_tokens,
        {_TOK.format("->'cache'->>'write'")} AS cache_write_tokens,
        {_num("->>'cost'", "DOUBLE")} AS cost, {_num("->>'attempts'")} AS attempts,
        {_num("->>'durationMs'")} AS duration_ms
    FROM {_latest("event")} AND data->>'type' = 'llm_call'
    UNION ALL
    SELECT id, id, 'title', split_part(title_model, '/', 1),
        substr(title_model, length(split_part(title_model, '/', 1)) + 2),
        {_UTC.format("coalesce(title_time, time_created)")}, title_input_tokens, title_output_tokens,
        title_reasoning_tokens, title_cache_read_tokens, title_cache_write_tokens, title_cost, NULL, NULL
    FROM _store.session WHERE title_model IS NOT NULL OR title_cost IS NOT NULL"""
VIEWS["daily_cost"] = """WITH calls AS (
        SELECT CAST(time AS DATE) AS day, provider, model, 'step' AS kind, session_id, input_tokens, output_tokens,
            reasoning_tokens, cache_read_tokens, cache_write_tokens, cost FROM step
        UNION ALL
        SELECT CAST(time AS DATE), provider, model, purpose, session_id, input_tokens, output_tokens,
            reasoning_tokens, cache_read_tokens, cache_write_tokens, cost FROM llm_call)
    SELECT day, provider, model, count(*) AS calls, count(*) FILTER (WHERE kind = 'title') AS title_calls,
        count(DISTINCT session_id) AS sessions, sum(input_tokens)::BIGINT AS input_tokens,
        sum(output_tokens)::BIGINT AS output_tokens, sum(reasoning_tokens)::BIGINT AS reasoning_tokens,
        sum(cache_read_tokens)::BIGINT AS cache_read_tokens, sum(cache_write_tokens)::BIGINT AS cache_write_tokens,
        sum(cost) AS cost
    FROM calls GROUP BY day, provider, model"""


def define_views(
    con, files: Plan, shadowed: dict, *, public: bool = True, tail: bool = True
) -> None:
    """``_store.<kind>`` over this plan and the tail's tables (made by its first rows: an empty
    tail has none), then the public views over them when ``public``."""
    con.execute("CREATE SCHEMA IF NOT EXISTS _store")
    layouts = tuple(p.layout for p in files.base)
    for kind in (*KINDS, *DERIVED):
        body = _kind_sql(kind, files, shadowed, layouts, tail)
        con.execute(f"CREATE OR REPLACE VIEW _store.{kind} AS {body}")
    if public:
        for name, body in VIEWS.items():
            con.execute(f"CREATE OR REPLACE VIEW {name} AS {body}")


def _kind_sql(kind: str, files: Plan, shadowed: dict, layouts: tuple, tail: bool) -> str:
    """``_store.<kind>``: the base files' rows of ``kind`` (sessions the tail holds left out of
    their file) and the tail's."""
    columns = select_list(kind)
    # a derived kind's rows have files of their own; the journal kinds share one per range
    where = "true" if kind in DERIVED else f"kind = '{kind}' AND deleted IS NOT TRUE"
    branches = []

    def path_of(part):
        return dict(part.derived).get(kind) if kind in DERIVED else part.path

    plain = [path_of(p) for p in files.base if p.path not in shadowed and path_of(p)]
    unify = ", union_by_name=true" if len(set(layouts)) > 1 else ""  # files of several versions
    if plain:
        listed = ", ".join(map(quote, plain))
        branches.append(f"SELECT {columns} FROM read_parquet([{listed}]{unify}) WHERE {where}")
    for part in files.base:
        keys = shadowed.get(part.path)
        left_out = f"{SESSION_KEY} NOT IN ({', '.join(map(quote, sorted(keys)))})" if keys else ""
        if keys and path_of(part):
            branches.append(
                f"SELECT {columns} FROM read_parquet([{quote(path_of(part))}]) "
                f"WHERE {where} AND {left_out}"
            )
        elif not path_of(part):  # a file of a version that did not derive this kind: computed
            # here until the merge's backfill has written it (merge.py)
            rows = (
                f"(SELECT {{}} FROM read_parquet([{quote(part.path)}]) WHERE kind = '{{}}' "
                f"AND deleted IS NOT TRUE AND {left_out or 'true'})"
            )
            body = derived(
                kind,
                rows.format(select_list("part"), "part"),
                rows.format(select_list("message"), "message"),
            )
            branches.append(f"SELECT {columns} FROM ({body})")
    if tail:
        branches.append(
            f"SELECT * FROM _tail.{kind}"
            if kind in DERIVED
            else f"SELECT {columns} FROM _tail.rows WHERE kind = '{kind}'"
        )
    if not branches:  # no file, no row yet: the columns alone
        empty = f"(SELECT * FROM ({typed(EMPTY_RELATION)}))"
        return (
            derived(kind, empty, empty, "false")
            if kind in DERIVED
            else f"SELECT {columns} FROM ({typed(EMPTY_RELATION)}) WHERE false"
        )
    return " UNION ALL BY NAME ".join(branches)
