"""``%%agent``, ``%agent …`` and ``%%agent_sql``: thin wrappers over the session API.

One module: the magics and the traits they are configured by are one IPython ``Magics``
class; its settings' checks and its cell magics' argument parsing must stay together.

Settings are traitlets on :class:`AgentMagics`, so ``%config AgentMagics.model
= "openai/gpt-4o-mini"`` works. Each magic parses its arguments, calls one
function of the Python API, and displays the result; errors are one line.

The traits are generated from the settings' one declaration (``core/settings.py``, via
``setting_traits.py``); every assignment is checked by the setting's spec (a refused value is
one line, the old value stays); the magics read settings as typed values. SQL text and
``%%agent`` cell bodies reach DuckDB and the model without IPython's ``$var``/``{expr}``
expansion (a cell body's ``{var}`` references are filled by ``context.interpolate``: lookups
only, never evaluated; ``--no-interpolate`` sends it as typed); the other ``%agent``
subcommands and the ``%%agent`` option line keep IPython's expansion.

One module: ``AgentMagics`` is the one class IPython registers; the magics, the settings they
read and the cell's wiring (view, record and replay, options) are its methods.
"""

from __future__ import annotations

import copy
import keyword
import sys
from dataclasses import fields
from typing import TYPE_CHECKING, Any

from IPython.core.magic import Magics, cell_magic, line_cell_magic, magics_class, no_var_expand
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.utils.text import DollarFormatter
from traitlets import TraitError, validate

from ..core.errors import AgentError, UsageError
from ..core.settings import SETTINGS, NotebookSettings, Settings, is_model_id
from ..tools.kernel import install, uninstall
from .setting_traits import SettingError, check_assignment, drop_refused, setting_trait

if TYPE_CHECKING:  # imported by the magics that use them, so that %load_ext stays cheap
    from ..session.agent_session import AgentSession
    from ..store import Store


class TurnInterrupted(AgentError):
    """The user interrupted a turn; what it produced is saved."""


def _user_frame():
    """The frame of the user's code that ran the magic (the caller of IPython's
    ``run_line_magic``/``run_cell_magic``), whose names ``$var`` expands; ``None`` when the
    magic was called directly."""
    frame = sys._getframe(1)
    while frame is not None:
        if (
            frame.f_code.co_name in ("run_line_magic", "run_cell_magic")
            and frame.f_globals.get("__name__") == "IPython.core.interactiveshell"
        ):
            return frame.f_back
        frame = frame.f_back
    return None


@magics_class
class AgentMagics(Magics):
    """The agent's magics and settings."""

    # One trait per declared setting (core/settings.py), so `%config AgentMagics.<name>` works
    # for each; the class namespace is the only place traitlets reads traits from.
    vars().update({info.name: setting_trait(info) for info in SETTINGS})

    def __init__(self, shell: Any = None, **kwargs: Any) -> None:
        config = kwargs.get("config", getattr(shell, "config", None))
        for message in drop_refused(type(self), config):  # e.g. from ipython_config.py
            print(f"SettingError: {message} — the default is used", file=sys.stderr)
        super().__init__(shell=shell, **kwargs)
        self.session: AgentSession | None = None
        self._store: Store | None = None
        self.records: Any = None  # session.replay.NotebookRecord, made by the first cell

    # -- settings: checked when assigned ---------------------------------------------

    def __setattr__(self, name: str, value: Any) -> None:
        try:
            super().__setattr__(name, value)
        except TraitError as err:  # the trait's own type check: say it as the schema does
            if isinstance(err, SettingError) or not self.trait_metadata(name, "config"):
                raise
            check_assignment(name, value, self.trait_metadata(name, "spec"))  # one line
            raise SettingError(f"{name}: {err}") from None

    # -- API used by the magics (and by tests) --------------------------------

    def settings(self) -> Settings:
        """The session's settings as they are now (every field of ``Settings``, from its trait)."""
        return Settings(**self._values(Settings))

    def notebook(self) -> NotebookSettings:
        """The magics' own settings as they are now (``live``, ``interpolate``)."""
        return NotebookSettings(**self._values(NotebookSettings))

    def _values(self, cls: type) -> dict[str, Any]:
        # copies, so a session's value does not change when a trait's dict or list does
        return {f.name: copy.deepcopy(getattr(self, f.name)) for f in fields(cls)}

    def store(self):
        from ..store import shared

        data_dir = self.settings().data_dir
        if self._store is None or self._store.data_dir != data_dir.expanduser().absolute():
            self._store = shared(
                data_dir
            )  # the process's one Store (and SQL catalog) for this history
        return self._store

    def current(self, *, new: bool = False, session_id: str | None = None):
        from ..session.agent_session import AgentSession

        settings, store = self.settings(), self.store()
        if session_id is not None:  # -s ID, use ID: checked against the id grammar before any use
            from ..core.ids import check_ref

            check_ref(session_id, "session")
        if session_id:
            if self.session is None or not self.session.info.id.startswith(session_id):
                self.session = AgentSession.open(
                    session_id, settings, store=store, shell=self.shell
                )
        elif new or self.session is None:
            self.session = AgentSession.create(settings, store=store, shell=self.shell)
        self.session.use_settings(settings)
        return self.session

    def update_config(self, config) -> None:
        """``%config AgentMagics.<name> = value``: a refused value is one line on stderr, as any
        of our errors reads (IPython would log it through the root logger, as
        ``ERROR:root:…``); the setting keeps its value. Assigning in Python still raises."""
        try:
            super().update_config(config)
        except AgentError as err:
            print(err, file=sys.stderr)  # the line names the setting and the fix

    @validate(*(info.name for info in SETTINGS))
    def _validate_setting(self, proposal):
        name = proposal.trait.name
        return check_assignment(name, proposal.value, self.trait_metadata(name, "spec"))

    # -- magics -------------------------------------------------------------------

    def _expand(self, text: str, frame) -> str:
        """IPython's ``$var``/``{expr}`` expansion (as ``InteractiveShell.var_expand``, which
        takes a stack depth): the user's namespace and the locals of ``frame``."""
        if frame is None or self.shell is None:
            return text
        try:
            names = {**self.shell.user_ns, **frame.f_locals}
            return DollarFormatter().vformat(text, args=[], kwargs=names)
        except Exception:  # as IPython: a line that cannot be formatted is left as typed
            return text

    @magic_arguments()
    @argument("-s", "--session", help="continue this session (id or unique prefix)")
    @argument("-n", "--new", action="store_true", help="start a new session")
    @argument("-m", "--model", help="provider/model for this turn")
    @argument("--fork", action="store_true", help="fork the current session first")
    @argument("-o", "--output", metavar="VAR", help="store the final text in VAR")
    @argument(
        "-f",
        "--file",
        action="append",
        default=[],
        metavar="PATH",
        help="attach a file (text, image, PDF; repeatable; globs: -f 'data/*.csv')",
    )
    @argument(
        "-a",
        "--attach",
        action="append",
        default=[],
        metavar="VAR",
        help="attach a notebook value (a DataFrame's schema and head, a figure as PNG)",
    )
    @argument(
        "-c",
        "--code",
        action="store_true",
        help="put the answer's last python code block into the next cell",
    )
    @argument("--no-interpolate", action="store_true", help="send {…} as typed")
    @argument("--full", action="store_true", help="every part inline (view 'full'), this cell")
    @argument(
        "-p",
        "--permit",
        action="append",
        default=[],
        metavar="RULE",
        help='a permission rule for this cell: "bash=allow", "edit:*.py=allow" (repeatable)',
    )
    @no_var_expand
    @cell_magic
    def agent_cell(self, line: str, cell: str):
        """Run the cell body as a prompt in the current (or given) session."""
        try:
            args = parse_argstring(self.agent_cell, line)
        except Exception as err:
            if isinstance(err, ValueError) and "quotation" in str(err):
                raise UsageError(
                    f"a quote is not closed in the %%agent line {line.strip()!r} — close it"
                ) from None
            raise UsageError(f"{err} — %agent help lists the options") from None
        if args.output and not (args.output.isidentifier() and not keyword.iskeyword(args.output)):
            raise UsageError(
                f"-o takes a Python variable name, not {args.output!r} — e.g. %%agent -o answer"
            )
        if args.model is not None and not is_model_id(args.model):
            raise UsageError(
                f"-m takes a 'provider/model' id, not {args.model!r} — "
                "e.g. %%agent -m openai/gpt-4o-mini"
            )
        if args.fork and (args.new or (self.session is None and not args.session)):
            raise UsageError(
                "--fork copies an existing session — run a %%agent cell first, or add -s ID (not --new)"
            )
        if not cell.strip():
            raise UsageError("the cell is empty — write the prompt below %%agent")
        from ..core.permission import parse_rule

        rules = [parse_rule(text) for text in args.permit]
        from ..context.prompt import build
        from .live import LiveView

        # interpolation and attachments first: a bad name or file is one line, nothing sent
        notebook = self.notebook()
        context = build(
            cell.strip(),
            self.shell,
            files=args.file,
            values=args.attach,
            interpolate=notebook.interpolate and not args.no_interpolate,
        )
        session = self.current(new=args.new, session_id=args.session)
        if args.fork:
            session = self.session = session.fork()
        from .commands.replay import records

        replay, first_line = records(self).start_turn(session, context.text, self.settings())
        if first_line:
            print(first_line)  # recording, or replaying: the first line of the cell's output
        # a replay is rendered once, final (as a saved notebook holds it, which nbval compares)
        live = notebook.live and is_kernel(self.shell) and replay is None
        detail = "full" if args.full else notebook.view
        view = LiveView(live, session, detail, banner=first_line or "")
        try:
            with view.asking(session):  # the view shows a call waiting for approval
                result = session.prompt(
                    cell.strip(),
                    model=args.model,
                    observer=view,
                    permission=rules,
                    context=context,
                    replay=replay,
                )
        except KeyboardInterrupt:
            raise TurnInterrupted(
                "interrupted — the partial answer is saved; run %%agent again to continue"
            ) from None
        finally:
            view.finish()
            if replay is None:
                self.records.after_turn(session, self.store())
        if args.output:
            assert self.shell is not None  # a registered magic runs in its shell
            self.shell.user_ns[args.output] = result.text
        if args.code:
            from ..context.prompt import code_to_next_cell

            code_to_next_cell(self.shell, result.text)
        return None

    @no_var_expand  # the subcommand decides (commands.dispatch); the cell body is never expanded
    @line_cell_magic
    def agent(self, line: str, cell: str | None = None):
        """``%agent <subcommand>``; ``%%agent`` (cell form) runs a prompt."""
        frame = _user_frame()
        if cell is not None:
            return self.agent_cell(self._expand(line, frame), cell)
        from .commands import dispatch

        return dispatch(self, line, lambda text: self._expand(text, frame))

    @no_var_expand  # the query reaches DuckDB as typed
    @cell_magic
    def agent_sql(self, line: str, cell: str):
        """``%%agent_sql [VAR <<]``: read-only SQL over the history; VAR << stores the result."""
        target = None
        if "<<" in line:
            target = line.split("<<", 1)[0].strip() or None
        frame = self.store().sql(cell)
        if target:
            assert self.shell is not None  # a registered magic runs in its shell
            self.shell.user_ns[target] = frame
        return frame


def is_kernel(shell) -> bool:
    """Live display-id updates only make sense in a kernel with a front end."""
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def load(ipython) -> None:
    magics = AgentMagics(shell=ipython)
    ipython.register_magics(magics)
    install(ipython)  # each cell's error, for {Err[n]}, %agent fix and the notebook tool
    # `%%agent` is the cell form of the line/cell `agent` magic; `agent_cell` is internal.
    ipython.magics_manager.magics["cell"].pop("agent_cell", None)


def unload(ipython) -> None:
    registry = ipython.magics_manager.registry
    magics = registry.pop("AgentMagics", None)
    if magics is not None and magics.session is not None:
        magics.session.wait_title(5.0)  # a background title call writes to the store
    if magics is not None and magics._store is not None:
        magics._store.close()
    if magics is not None and magics in getattr(ipython, "configurables", ()):
        ipython.configurables.remove(magics)  # %config no longer sets (nor reports errors for) it
    from ..tools import mcp_client  # cheap: the mcp SDK is imported only by a running server

    mcp_client.shutdown()  # MCP servers started by this extension stop with it (and at exit)
    uninstall(ipython)
    for kind, name in (("line", "agent"), ("cell", "agent"), ("cell", "agent_sql")):
        ipython.magics_manager.magics[kind].pop(name, None)
