"""``%%agent``, ``%agent …`` and ``%%agent_sql``: thin wrappers over the session API.

Settings are traitlets on :class:`AgentMagics`, so ``%config AgentMagics.model
= "openai/gpt-4o-mini"`` works. Each magic parses its arguments, calls one
function of the Python API, and displays the result; errors are one line.
"""

from __future__ import annotations

import shlex

from IPython.core.magic import Magics, cell_magic, line_cell_magic, magics_class, no_var_expand
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from traitlets import Bool, Dict, Float, Int, Unicode, Union

from .errors import AgentError, UsageError


class TurnInterrupted(AgentError):
    """The user interrupted a turn; what it produced is saved."""


@magics_class
class AgentMagics(Magics):
    """The agent's magics and settings."""

    model = Unicode("", help="provider/model id; empty: OpenAI when a key is set, else the local model").tag(config=True)
    data_dir = Unicode("", help="history and tool outputs; default $JUPYTER_SESSION_AGENT_DIR or ~/.local/share").tag(config=True)
    model_overrides = Dict(help="model id → {context, output, input, price_input, price_output, …}").tag(config=True)
    compaction = Dict(help="auto, prune, reserved, prune_protect, prune_minimum, tail_turns, …").tag(config=True)
    max_steps = Int(25, help="LLM calls per turn at most").tag(config=True)
    max_retries = Int(4, help="retries of a failed LLM call at most").tag(config=True)
    request_timeout = Float(300.0, help="seconds to wait for the model server").tag(config=True)
    local_context = Int(8192, help="context size of the embedded local model").tag(config=True)
    live = Bool(True, help="update the cell while the agent works").tag(config=True)
    permission = Union(
        [Dict(), Unicode()],
        help='permission rules after the defaults: {"bash": "allow", "edit": {"*.py": "allow"}}; '
             "actions allow, ask, deny; last match wins (docs/permissions.md)",
    ).tag(config=True)
    # lifecycle (docs/lifecycle.md)
    titles = Bool(True, help="generate a session title from the first prompt (its cost is recorded)").tag(config=True)
    title_model = Unicode("", help="provider/model for titles; empty: the session's model").tag(config=True)
    subagents = Bool(False, help="offer the task tool: the model can start subagent (child) sessions").tag(config=True)
    subagent_model = Unicode("", help="provider/model for subagents; empty: the caller's model").tag(config=True)
    snapshot = Dict(help="file snapshots for revert: enabled, max_file_size, max_files, exclude").tag(config=True)
    memory = Dict(help="cross-session memory (docs/memory.md): enabled, inject, max_tokens, auto_remember, "
                       "extractor, top_k, threshold, scope, history, embeddings").tag(config=True)

    def __init__(self, shell=None, **kwargs):
        super().__init__(shell=shell, **kwargs)
        self.session = None
        self._store = None

    # -- API used by the magics (and by tests) --------------------------------

    def settings(self):
        from .settings import Settings, resolve_data_dir

        return Settings(
            model=self.model, data_dir=resolve_data_dir(self.data_dir or None),
            model_overrides=dict(self.model_overrides), compaction=dict(self.compaction),
            max_steps=self.max_steps, max_retries=self.max_retries,
            request_timeout=self.request_timeout, local_context=self.local_context,
            permission=self.permission if isinstance(self.permission, str) else dict(self.permission),
            titles=self.titles, title_model=self.title_model, subagents=self.subagents,
            subagent_model=self.subagent_model, snapshot=dict(self.snapshot), memory=dict(self.memory),
        )

    def store(self):
        from .store import shared

        data_dir = self.settings().data_dir
        if self._store is None or self._store.data_dir != data_dir.expanduser().absolute():
            self._store = shared(data_dir)  # the process's one Store (and SQL catalog) for this history
        return self._store

    def current(self, *, new: bool = False, session_id: str | None = None):
        from .session import AgentSession

        settings, store = self.settings(), self.store()
        if session_id:
            if self.session is None or not self.session.info.id.startswith(session_id):
                self.session = AgentSession.open(session_id, settings, store=store, shell=self.shell)
        elif new or self.session is None:
            self.session = AgentSession.create(settings, store=store, shell=self.shell)
        self.session.settings = settings
        return self.session

    # -- magics -------------------------------------------------------------------

    @magic_arguments()
    @argument("-s", "--session", help="continue this session (id or unique prefix)")
    @argument("-n", "--new", action="store_true", help="start a new session")
    @argument("-m", "--model", help="provider/model for this turn")
    @argument("--fork", action="store_true", help="fork the current session first")
    @argument("-o", "--output", metavar="VAR", help="store the final text in VAR")
    @argument("-p", "--permit", action="append", default=[], metavar="RULE",
              help='a permission rule for this cell: "bash=allow", "edit:*.py=allow" (repeatable)')
    @no_var_expand
    @cell_magic
    def agent_cell(self, line: str, cell: str):
        """Run the cell body as a prompt in the current (or given) session."""
        try:
            args = parse_argstring(self.agent_cell, line)
        except Exception as err:
            raise UsageError(f"{err} — %agent help lists the options") from None
        if args.fork and (args.new or (self.session is None and not args.session)):
            raise UsageError("--fork copies an existing session — run a %%agent cell first, or add -s ID (not --new)")
        if not cell.strip():
            raise UsageError("the cell is empty — write the prompt below %%agent")
        from .permission import parse_rule

        rules = [parse_rule(text) for text in args.permit]
        from .display import LiveView

        session = self.current(new=args.new, session_id=args.session)
        if args.fork:
            session = self.session = session.fork()
        view = LiveView(live=self.live and _is_kernel(self.shell), session=session)
        try:
            result = session.prompt(cell.strip(), model=args.model, observer=view, permission=rules)
        except KeyboardInterrupt:
            raise TurnInterrupted("interrupted — the partial answer is saved; run %%agent again to continue") from None
        finally:
            view.finish()
        if args.output:
            self.shell.user_ns[args.output] = result.text
        return None

    @line_cell_magic
    def agent(self, line: str, cell: str | None = None):
        """``%agent <subcommand>``; ``%%agent`` (cell form) runs a prompt."""
        if cell is not None:
            return self.agent_cell(line, cell)
        from .commands import load_all

        words = shlex.split(line)
        name, rest = (words[0], words[1:]) if words else ("help", [])
        command = load_all().get(name)
        if command is None:
            raise UsageError(f"unknown or not yet available subcommand '{name}' — %agent help lists them")
        raw = line.strip()[len(name):].strip()
        return command.handler(self, rest, raw)

    @cell_magic
    def agent_sql(self, line: str, cell: str):
        """``%%agent_sql [VAR <<]``: read-only SQL over the history; VAR << stores the result."""
        target = None
        if "<<" in line:
            target = line.split("<<", 1)[0].strip() or None
        frame = self.store().sql(cell)
        if target:
            self.shell.user_ns[target] = frame
        return frame


def _is_kernel(shell) -> bool:
    """Live display-id updates only make sense in a kernel with a front end."""
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def load(ipython) -> None:
    magics = AgentMagics(shell=ipython)
    ipython.register_magics(magics)
    # `%%agent` is the cell form of the line/cell `agent` magic; `agent_cell` is internal.
    ipython.magics_manager.magics["cell"].pop("agent_cell", None)


def unload(ipython) -> None:
    registry = ipython.magics_manager.registry
    magics = registry.pop("AgentMagics", None)
    if magics is not None and magics.session is not None:
        magics.session.wait_title(5.0)  # a background title call writes to the store
    if magics is not None and magics._store is not None:
        magics._store.close()
    for kind, name in (("line", "agent"), ("cell", "agent"), ("cell", "agent_sql")):
        ipython.magics_manager.magics[kind].pop(name, None)
