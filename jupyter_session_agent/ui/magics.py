"""``%%agent``, ``%agent …`` and ``%%agent_sql``: thin wrappers over the session API.

Settings are traitlets on :class:`AgentMagics`, so ``%config AgentMagics.model
= "openai/gpt-4o-mini"`` works. Each magic parses its arguments, calls one
function of the Python API, and displays the result; errors are one line.

Every setting is checked when it is assigned (``settings.check_setting``, one schema per
setting; a setting it does not list is checked by its trait type): a value that is not
allowed is refused with one line saying what is, and the old value stays. SQL text and
``%%agent`` cell bodies reach DuckDB and the model without IPython's ``$var``/``{expr}``
expansion (a cell body's ``{var}`` references are filled by ``context.interpolate``: lookups
only, never evaluated; ``--no-interpolate`` sends it as typed); the other ``%agent``
subcommands and the ``%%agent`` option line keep IPython's expansion.
"""

from __future__ import annotations

import keyword
import sys
from typing import Any

from IPython.core.magic import Magics, cell_magic, line_cell_magic, magics_class, no_var_expand
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from traitlets import Bool, Dict, Float, Int, List, TraitError, TraitType, Unicode, Union, validate

from ..core.errors import AgentError, ConfigError, UsageError


class TurnInterrupted(AgentError):
    """The user interrupted a turn; what it produced is saved."""


class SettingError(ConfigError, TraitError):
    """A setting refused on assignment: one line saying what is allowed; the old value stays.

    A ``TraitError`` too, so traitlets rolls a ``%config`` assignment back."""


def _settings_declared(namespace: dict[str, Any]) -> list[str]:
    """The configurable traits declared so far in a class body (every setting)."""
    return [
        name
        for name, value in list(namespace.items())
        if isinstance(value, TraitType) and value.metadata.get("config")
    ]


def _fallback_spec(trait: TraitType):
    """How to check a setting the schema does not list: by its trait type."""
    from ..core.settings import BOOL, TEXT, number, whole

    if isinstance(trait, Bool):
        return BOOL
    if isinstance(trait, Int):
        return whole(0)
    if isinstance(trait, Float):
        return number(0)
    if isinstance(trait, Unicode):
        return TEXT
    return None


class _Number(Float):
    """A ``Float`` setting that leaves ``True``/``False`` as they are (``Float`` casts them to
    1.0/0.0), so the setting's check refuses them as it does for every other number."""

    def validate(self, obj, value):
        return value if isinstance(value, bool) else super().validate(obj, value)


def _sections(config, cls) -> list:
    """The sections of ``config`` that configure ``cls`` (its name and its bases')."""
    if config is None:
        return []
    names = [c.__name__ for c in cls.mro() if hasattr(c, "class_trait_names")]
    return [config[n] for n in names if n in config]


def _drop_refused(cls, config) -> list[str]:
    """Remove the values in ``config`` a new ``cls`` would refuse; one message for each.

    The shell's config holds what ``ipython_config.py`` set, and every ``%config`` line, refused
    or not (the shell merges it after the magics refused it): without this, a refused value
    would make the next ``%load_ext``/``%reload_ext`` fail."""
    from ..core.settings import check_setting

    messages = []
    traits = cls.class_traits(config=True)
    for section in _sections(config, cls):
        for name in [n for n in list(section) if n in traits]:
            value, trait = section[name], traits[name]
            if not isinstance(value, (str, int, float, bool, dict, list, tuple, type(None))):
                continue  # a lazy value: traitlets resolves it against the default
            try:
                check_setting(name, value, spec=_fallback_spec(trait), default=trait.default_value)
            except ConfigError as err:
                messages.append(str(err))
                del section[name]
    return messages


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

    model = Unicode(
        "", help="provider/model id; empty: OpenAI when a key is set, else the local model"
    ).tag(config=True)
    data_dir = Unicode(
        "", help="history and tool outputs; default $JUPYTER_SESSION_AGENT_DIR or ~/.local/share"
    ).tag(config=True)
    model_overrides = Dict(
        help="model id → {context, output, input, price_input, price_output, …}"
    ).tag(config=True)
    compaction = Dict(
        help="auto, prune, reserved, prune_protect, prune_minimum, tail_turns, …"
    ).tag(config=True)
    max_steps = Int(25, help="LLM calls per turn at most").tag(config=True)
    max_retries = Int(4, help="retries of a failed LLM call at most").tag(config=True)
    request_timeout = _Number(
        600.0, help="seconds one request to the model server may take in all"
    ).tag(config=True)
    first_byte_timeout = _Number(
        60.0, help="seconds to wait for the model server's first byte"
    ).tag(config=True)
    idle_timeout = _Number(60.0, help="seconds of silence allowed between two streamed chunks").tag(
        config=True
    )
    max_retry_wait = _Number(
        60.0, help="seconds a retry may wait; a longer retry-after fails at once"
    ).tag(config=True)
    local_context = Int(8192, help="context size of the embedded local model").tag(config=True)
    local_idle_timeout = _Number(
        600.0,
        help="seconds the embedded model server may sit idle before it "
        "stops (it restarts on demand); 0: never",
    ).tag(config=True)
    code_actions = Union(
        [Unicode(), Bool(), List(Unicode())],
        default_value="auto",
        help="models that write ```python blocks instead of JSON tool calls: 'auto' "
        "(the embedded model), 'on', 'off' or ['ollama/*', …]",
    ).tag(config=True)
    live = Bool(True, help="update the cell while the agent works").tag(config=True)
    interpolate = Bool(
        True,
        help="fill {var}, {df.shape}, {In[n]}, {Out[n]}, {Err[n]} into %%agent "
        "prompts ({{x}} sends {x}; --no-interpolate per cell)",
    ).tag(config=True)
    permission = Union(
        [Dict(), Unicode()],
        help='permission rules after the defaults: {"bash": "allow", "edit": {"*.py": "allow"}}; '
        "actions allow, ask, deny; last match wins (docs/permissions.md)",
    ).tag(config=True)
    # lifecycle (docs/lifecycle.md)
    titles = Bool(
        True, help="generate a session title from the first prompt (its cost is recorded)"
    ).tag(config=True)
    title_model = Unicode("", help="provider/model for titles; empty: the session's model").tag(
        config=True
    )
    subagents = Bool(
        False, help="offer the task tool: the model can start subagent (child) sessions"
    ).tag(config=True)
    subagent_model = Unicode(
        "", help="provider/model for subagents; empty: the caller's model"
    ).tag(config=True)
    snapshot = Dict(
        help="file snapshots for revert: enabled, max_file_size, max_files, exclude"
    ).tag(config=True)
    memory = Dict(
        help="cross-session memory (docs/memory.md): enabled, inject, max_tokens, auto_remember, "
        "extractor, top_k, threshold, scope, history, embeddings"
    ).tag(config=True)
    # MCP servers (docs/mcp.md)
    mcp = Dict(
        help='MCP servers, OpenCode\'s shape: {"time": {"type": "local", "command": ["python", "-m", '
        '"mcp_server_time"]}} or {"type": "remote", "url": …, "headers": {…}}'
    ).tag(config=True)
    mcp_opencode = Union(
        [Bool(), Unicode()],
        default_value=False,
        help="also read the mcp section of the project's opencode.json (True) or of this file",
    ).tag(config=True)

    def __init__(self, shell=None, **kwargs):
        config = kwargs.get("config", getattr(shell, "config", None))
        for message in _drop_refused(type(self), config):  # e.g. from ipython_config.py
            print(f"SettingError: {message} — the default is used", file=sys.stderr)
        super().__init__(shell=shell, **kwargs)
        self.session = None
        self._store = None

    # -- settings: checked when assigned ---------------------------------------------

    def __setattr__(self, name: str, value: Any) -> None:
        try:
            super().__setattr__(name, value)
        except TraitError as err:  # the trait's own type check: say it as the schema does
            if isinstance(err, SettingError) or not self.trait_metadata(name, "config"):
                raise
            self._check_setting(name, value)  # raises the one-line SettingError
            raise SettingError(f"{name}: {err}") from None

    # -- API used by the magics (and by tests) --------------------------------

    def settings(self):
        from ..core.settings import Settings, resolve_data_dir

        return Settings(
            model=self.model,
            data_dir=resolve_data_dir(self.data_dir or None),
            model_overrides=dict(self.model_overrides),
            compaction=dict(self.compaction),
            max_steps=self.max_steps,
            max_retries=self.max_retries,
            request_timeout=self.request_timeout,
            local_context=self.local_context,
            first_byte_timeout=self.first_byte_timeout,
            idle_timeout=self.idle_timeout,
            max_retry_wait=self.max_retry_wait,
            permission=self.permission
            if isinstance(self.permission, str)
            else dict(self.permission),
            titles=self.titles,
            title_model=self.title_model,
            subagents=self.subagents,
            subagent_model=self.subagent_model,
            snapshot=dict(self.snapshot),
            memory=dict(self.memory),
            mcp=dict(self.mcp),
            mcp_opencode=self.mcp_opencode,
            local_idle_timeout=self.local_idle_timeout,
            code_actions=list(self.code_actions)
            if isinstance(self.code_actions, (list, tuple))
            else self.code_actions,
        )

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
        self.session.settings = settings
        return self.session

    # Keep this after the last setting: every configurable trait above is validated.
    @validate(*_settings_declared(locals()))
    def _validate_setting(self, proposal):
        return self._check_setting(proposal.trait.name, proposal.value)

    def _check_setting(self, name: str, value: Any) -> Any:
        from ..core.settings import check_setting

        trait = self.traits()[name]
        try:
            return check_setting(
                name, value, spec=_fallback_spec(trait), default=trait.default_value
            )
        except ConfigError as err:
            raise SettingError(str(err)) from None

    # -- magics -------------------------------------------------------------------

    def _expand(self, text: str, frame) -> str:
        """IPython's ``$var``/``{expr}`` expansion (as ``InteractiveShell.var_expand``, which
        takes a stack depth): the user's namespace and the locals of ``frame``."""
        if frame is None or self.shell is None:
            return text
        from IPython.utils.text import DollarFormatter

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
        if args.model is not None:
            from ..core.settings import is_model_id

            if not is_model_id(args.model):
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
        from .display import LiveView

        # interpolation and attachments first: a bad name or file is one line, nothing sent
        context = build(
            cell.strip(),
            self.shell,
            files=args.file,
            values=args.attach,
            interpolate=self.interpolate and not args.no_interpolate,
        )
        session = self.current(new=args.new, session_id=args.session)
        if args.fork:
            session = self.session = session.fork()
        view = LiveView(live=self.live and is_kernel(self.shell), session=session)
        try:
            result = session.prompt(
                cell.strip(), model=args.model, observer=view, permission=rules, context=context
            )
        except KeyboardInterrupt:
            raise TurnInterrupted(
                "interrupted — the partial answer is saved; run %%agent again to continue"
            ) from None
        finally:
            view.finish()
        if args.output:
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
            self.shell.user_ns[target] = frame
        return frame


def is_kernel(shell) -> bool:
    """Live display-id updates only make sense in a kernel with a front end."""
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def load(ipython) -> None:
    magics = AgentMagics(shell=ipython)
    ipython.register_magics(magics)
    from ..tools.kernel import install

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
    from ..tools.kernel import uninstall

    uninstall(ipython)
    for kind, name in (("line", "agent"), ("cell", "agent"), ("cell", "agent_sql")):
        ipython.magics_manager.magics[kind].pop(name, None)
