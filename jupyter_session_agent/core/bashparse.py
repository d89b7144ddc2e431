"""What a bash command line would run, read with a real parser, for the permission rules.

One module: one walker over tree-sitter's syntax tree; every construct it reads feeds the
same commands, paths and unsupported reasons, and failing closed is reviewed in one place.
What a command does once read (wrappers, shells, ``sed``/``awk``/``find`` scripts, arity) is
:mod:`.bashrules`'s; what quoting, escapes, globs and braces make of a word, :mod:`.bashwords`'s.

:func:`analyse` parses a command line with tree-sitter-bash and returns

* ``commands``: every simple command the line runs, each checked against the rules on its
  own: the parts of lists, pipelines, subshells, ``{ …; }`` groups, ``if``/``for``/``while``
  bodies, command and process substitutions (wherever they appear: arguments, double
  quotes, assignments, redirections), and the command that a wrapper runs (``env X=1 cmd``,
  ``command``, ``nohup``, ``timeout``, ``xargs``, ``find -exec``, ``sudo``, …);
* ``paths``: the path words (arguments, assignment values, redirection targets) with ``~``,
  ``~+``, ``$HOME`` and ``$PWD`` expanded;
* ``unresolved``: words whose value cannot be known without running the line (a variable, a
  command substitution, a brace expansion…): they may name any path;
* ``unsupported``: why the line cannot be fully accounted for (``opaque``: the reasons that
  may also hide a command or a path, e.g. a string run as code). The checker **fails closed**:
  ANSI-C (``$'…'``) and locale (``$"…"``) quoting, heredocs, ``eval``, ``source``/``.``,
  ``exec``, ``alias``, ``trap``, function definitions, ``bash -c``/``sh -c`` strings (and
  shells reading commands from stdin), arithmetic, ``case``, parameter expansions other than
  ``$NAME``/``${NAME}``, a computed command name, backticks holding backslashes, control or
  odd whitespace characters, text the parser skipped, and parse errors. The permission gate
  asks about such a line instead of allowing it.

Pure apart from the parser: no file system access (``core/asks.py`` resolves the paths).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from .bashrules import (
    ASSIGNMENT,
    AWKS,
    BASH_ARITY,
    FIND,
    SHELLS,
    WRAPPERS,
    awk_reason,
    builtin_reason,
    declare_reason,
    find_actions,
    prefix,
    sed_reason,
    shell_reason,
    wrapped,
)
from .bashwords import (
    UNKNOWN,
    WordValue,
    ansi_c,
    braces,
    dquote,
    exact_glob,
    has_glob,
    literal,
    odd_characters,
)

_OPENERS = frozenset({"${", "$(", "$((", "`", "$["})


_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# A literal that bash may evaluate as an arithmetic subscript: a[$(cmd)], a[`cmd`], a[${x}].
_SUBSCRIPT_CODE = re.compile(r"\[[^\]]*[$`]")
_PLAIN_WORD = re.compile(r"^[^\s'\"\\]+$")
_ARITHMETIC_TESTS = frozenset({"-eq", "-ne", "-lt", "-le", "-gt", "-ge"})
_NUMERIC_SPECIALS = frozenset({"?", "#", "$", "!"})
_STATEMENTS = frozenset(
    {
        "command",
        "redirected_statement",
        "list",
        "pipeline",
        "subshell",
        "compound_statement",
        "if_statement",
        "while_statement",
        "for_statement",
        "negated_command",
        "test_command",
        "variable_assignment",
        "variable_assignments",
        "declaration_command",
        "unset_command",
    }
)
# Keywords and operators a statement container may hold.
_CONTAINER_TOKENS = frozenset(
    {
        ";",
        "&",
        "&&",
        "||",
        "|",
        "|&",
        "(",
        ")",
        "{",
        "}",
        "if",
        "then",
        "fi",
        "elif",
        "else",
        "do",
        "done",
        "while",
        "until",
        "for",
        "in",
        "!",
        "$(",
        "`",
        "<(",
        ">(",
        ";;",
    }
)
_REDIRECT_OPS = frozenset({">", ">>", "<", "&>", "&>>", "<&", ">&", ">|", "<&-", ">&-"})
_FD_TARGET = re.compile(r"^(\d+-?|-)$")
# Nodes whose text the checker decodes itself (it does not look inside them).
_ATOMIC = frozenset(
    {
        "word",
        "raw_string",
        "string_content",
        "number",
        "comment",
        "variable_name",
        "special_variable_name",
        "test_operator",
        "regex",
        "extglob_pattern",
        "file_descriptor",
        "ansi_c_string",
        "heredoc_body",
        "heredoc_start",
        "heredoc_end",
        "heredoc_content",
    }
)
# Pieces of a word, and the nodes made of joined pieces (where no blank separates them).
_WORDLIKE = frozenset(
    {
        "word",
        "string",
        "raw_string",
        "concatenation",
        "simple_expansion",
        "expansion",
        "number",
        "command_substitution",
        "process_substitution",
        "ansi_c_string",
        "translated_string",
        "brace_expression",
        "arithmetic_expansion",
        "command_name",
        "extglob_pattern",
        "array",
    }
)
_JOINED = frozenset(
    {
        "concatenation",
        "string",
        "command_name",
        "variable_assignment",
        "expansion",
        "simple_expansion",
        "subscript",
    }
)
# Containers whose children may be separated by newlines (statement lists).
_NEWLINE_OK = frozenset(
    {
        "program",
        "compound_statement",
        "subshell",
        "do_group",
        "if_statement",
        "elif_clause",
        "else_clause",
        "while_statement",
        "for_statement",
        "command_substitution",
        "process_substitution",
        "list",
        "pipeline",
        "redirected_statement",
        "negated_command",
        "heredoc_redirect",
    }
)


@dataclass(frozen=True)
class Command:
    """One simple command: ``words`` as bash passes them (leading assignments included)."""

    words: tuple[str, ...]
    text: str  # what the rules match: the words (quoted where needed), then the redirections
    prefix: str  # the "always" prefix: ``git checkout``, ``ls``


@dataclass(frozen=True)
class PathWord:
    """A word that may name a file: its value, ``~``/``~+``/``$HOME``/``$PWD`` expanded."""

    value: str
    glob: bool = False  # unquoted ``*``, ``?`` or ``[`` (bash expands it against the disk)
    redirect: bool = False
    exact: bool = True  # as a glob, ``value`` means what bash means (no quoted ``*?[``, no ``[:``)


@dataclass(frozen=True)
class Analysis:
    commands: tuple[Command, ...]
    paths: tuple[PathWord, ...]
    unresolved: tuple[str, ...]
    unsupported: tuple[str, ...]  # every reason the line asks
    opaque: tuple[str, ...] = ()  # reasons that may hide a command or a path (the rest only ask)

    @property
    def complete(self) -> bool:
        """Every command and path of the line is accounted for."""
        return not self.unsupported and not self.unresolved


def analyse(command: str, *, home: str | None = None, pwd: str | None = None) -> Analysis:
    """The commands, paths, unresolved words and unsupported constructs of ``command``."""
    home = home if home is not None else os.environ.get("HOME") or os.path.expanduser("~")
    return _analyse(str(command), home, pwd or "")


@lru_cache(maxsize=512)
def _analyse(command: str, home: str, pwd: str) -> Analysis:
    walker = _Walker(command, home, pwd)
    walker.run()
    return Analysis(
        commands=tuple(dict.fromkeys(walker.commands + walker.nested)),
        paths=tuple(dict.fromkeys(walker.paths)),
        unresolved=tuple(dict.fromkeys(walker.unresolved)),
        unsupported=tuple(dict.fromkeys(walker.reasons + walker.soft)),
        opaque=tuple(dict.fromkeys(walker.reasons)),
    )


def quote(word: str) -> str:
    """A word as the rules see it: plain words as they are, others in single quotes."""
    if _PLAIN_WORD.match(word):
        return word
    return "'" + word.replace("'", "'\"'\"'") + "'"


@lru_cache(maxsize=1)
def _parser() -> Any:
    import tree_sitter
    import tree_sitter_bash

    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language()))


# Variables the checker would otherwise take as known: what the line can assign to them
# makes them unknown (``read PWD``, ``printf -v HOME``, ``for CDPATH in``, ``declare``, …).
PINNED = ("PWD", "HOME", "OLDPWD", "CDPATH")
CHECK_SECONDS = 2.0  # the checker's own time for one line; beyond it the line asks
_CLUSTER = 12  # option letters of a cluster (`-xzvf…`) a glued value may follow


def assignable(command: str) -> frozenset[str]:
    """The names of :data:`PINNED` that ``command`` may assign: every mention that is not
    a plain ``$NAME``/``${NAME}`` expansion counts (quotes and backslashes removed first, so
    ``read P"W"D`` and ``printf -vPWD`` count). Conservative: ``echo PWD`` counts too."""
    text = re.sub(r"[\"'\\]", "", command)
    found = set()
    for name in PINNED:
        for match in re.finditer(name, text):
            start, end = match.span()
            before = text[max(0, start - 2) : start]
            after = text[end : end + 1]
            plain = (before.endswith("$") or before == "${") and not (
                after.isalnum() or after == "_"
            )
            if not plain:
                found.add(name)
                break
    return frozenset(found)


class _Walker:
    def __init__(self, command: str, home: str, pwd: str) -> None:
        self.command = command
        self.src = command.encode("utf-8", "surrogatepass")
        self.assigned = assignable(command)
        self.home = "" if "HOME" in self.assigned else home
        self.pwd = "" if "PWD" in self.assigned else pwd
        self.deadline = time.monotonic() + CHECK_SECONDS
        self.late = False
        self.commands: list[Command] = []
        self.nested: list[Command] = []
        self.paths: list[PathWord] = []
        self.unresolved: list[str] = []
        self.reasons: list[str] = []  # may hide commands or paths
        self.soft: list[str] = []  # unusual, asks, hides nothing: every command and path is seen
        self.depth = 0  # inside command substitutions
        self.dashes: set[int] = set()  # redirected statements whose command lost a `-` argument

    # -- entry ---------------------------------------------------------------

    def run(self) -> None:
        odd = odd_characters(self.command)
        if odd:
            self.reasons.append(f"{odd} in the command")
        try:
            tree = _parser().parse(self.src)
        except Exception as err:  # a parser failure is an unsupported line, never an allowed one
            self.reasons.append(f"the bash parser failed ({type(err).__name__})")
            return
        root = tree.root_node
        if root.has_error:
            self.reasons.append("bash syntax the parser cannot read")
        self._gap(0, root.start_byte, "program")
        self._gap(root.end_byte, len(self.src), "program")
        try:
            self._gaps(root)
            self._statements(root)
        except RecursionError:
            self.reasons.append("a line nested too deeply to check")

    def _late(self) -> bool:
        """Past the checker's time bound: the rest of the line is not read, and it asks."""
        if not self.late and time.monotonic() > self.deadline:
            self.late = True
            self.reasons.append(f"a line too long to check within {CHECK_SECONDS:g} s")
        return self.late

    def text(self, node: Any) -> str:
        return self.src[node.start_byte : node.end_byte].decode("utf-8", "surrogatepass")

    def unsupported(self, reason: str, node: Any = None) -> None:
        self.reasons.append(reason)
        if node is not None:
            self._salvage(node)

    def _salvage(self, node: Any) -> None:
        """Commands inside a construct we cannot account for are still checked (a deny denies)."""
        for child in node.named_children:
            if child.type in ("command_substitution", "process_substitution"):
                self._substitution(child)
            elif child.type in ("command", "redirected_statement", "list", "pipeline"):
                self._statement(child)
            else:
                self._salvage(child)

    # -- text the parser skipped ---------------------------------------------

    def _gaps(self, root: Any) -> None:
        stack = [root]
        count = 0
        while stack:
            count += 1
            if count % 4096 == 0 and self._late():
                return
            node = stack.pop()
            if node.type in _ATOMIC or not node.children:
                continue
            pos = node.start_byte
            previous = None
            for child in node.children:
                if (
                    node.type == "redirected_statement"
                    and child.type == "heredoc_redirect"
                    and previous is not None
                    and previous.type == "command"
                    and self.src[pos : child.start_byte].strip(b" \t") == b"-"
                ):
                    # tree-sitter drops a lone `-` before `<<` (`python3 - <<'EOF'`): put it back
                    self.dashes.add(node.id)
                else:
                    self._gap(pos, child.start_byte, node.type)
                if (
                    previous is not None
                    and previous.end_byte == child.start_byte
                    and node.type not in _JOINED
                    and _wordlike(previous)
                    and _wordlike(child)
                ):
                    # bash reads two pieces with nothing between them as one word
                    joined = self.text(previous) + self.text(child)
                    self.reasons.append(f"a word the parser split (`{joined}`)")
                if not child.is_named and not child.children and not self._same_token(node, child):
                    # a token the parser renamed (`-<<` read as `<<`): bash may read it otherwise
                    self.reasons.append(f"the token `{self.text(child)}` read as `{child.type}`")
                stack.append(child)
                pos = child.end_byte
                previous = child
            self._gap(pos, node.end_byte, node.type)

    def _same_token(self, parent: Any, token: Any) -> bool:
        """Is ``token``'s text its type? Inside double quotes the parser puts the blanks
        before ``${``, ``$(``, ``$((`` or a backtick into that token: allowed (and kept)."""
        text = self.text(token)
        if text == token.type:
            return True
        grand = parent.parent
        return (
            token.type in _OPENERS
            and grand is not None
            and grand.type == "string"
            and text.endswith(token.type)
            and not text[: -len(token.type)].strip(" \t\n")
        )

    def _gap(self, start: int, end: int, parent: str) -> None:
        """Text between tokens must be blanks (a newline only between statements)."""
        if start >= end:
            return
        gap = self.src[start:end].decode("utf-8", "surrogatepass")
        rest = re.sub(r"(?<=[ \t])\\\n", "", gap)  # a line continuation after a blank
        if parent not in _NEWLINE_OK:
            ok = set(" \t")
        else:
            ok = set(" \t\n")
        if rest.strip(" \t\n") or not set(rest) <= ok:
            self.reasons.append("text the parser could not place (a backslash-newline in a word?)")

    # -- statements ------------------------------------------------------------

    def _statements(self, node: Any) -> None:
        for child in node.children:
            if not child.is_named:
                if child.type not in _CONTAINER_TOKENS:
                    self.unsupported(f"`{child.type}`")
                continue
            self._statement(child)

    def _statement(self, node: Any) -> None:
        if self._late():
            return
        kind = node.type
        if kind == "comment":
            self._comment(node)
        elif kind in (
            "program",
            "list",
            "pipeline",
            "subshell",
            "do_group",
            "elif_clause",
            "else_clause",
            "if_statement",
            "negated_command",
        ):
            self._statements(node)
        elif kind == "compound_statement":
            if node.children and node.children[0].type == "((":
                self.unsupported("arithmetic (( … ))", node)
            else:
                self._statements(node)
        elif kind == "while_statement":
            self._statements(node)
        elif kind == "for_statement":
            self._for(node)
        elif kind == "redirected_statement":
            self._redirected(node)
        elif kind == "command":
            self._command(node)
        elif kind in ("variable_assignment", "variable_assignments"):
            self._assignments(node)
        elif kind == "declaration_command":
            self._declaration(node)
        elif kind == "unset_command":
            self._unset(node)
        elif kind == "test_command":
            self._test(node)
        elif kind == "function_definition":
            # asks, but its body is read like any other statement (a call of it runs nothing else)
            self.soft.append("a function definition")
            for child, field in _fielded(node):
                if field == "body":
                    self._statement(child)
                elif child.type == "comment":
                    self._comment(child)
        elif kind == "case_statement":
            self.unsupported("case", node)
        elif kind == "c_style_for_statement":
            self.unsupported("arithmetic for (( … ))", node)
        elif kind == "heredoc_body":
            self.unsupported("a heredoc body the parser placed oddly", node)
        else:
            self.unsupported(f"`{kind}`", node)

    def _comment(self, node: Any) -> None:
        """A comment is only a comment where bash also reads one: ``#`` starting a word."""
        start = node.start_byte
        text = self.text(node)
        if "\n" in text or not text.startswith("#"):
            self.reasons.append("a comment the parser read differently")
            return
        previous = self.src[start - 1 : start]  # bytes: looking back never copies the line
        if not previous or previous in b"\n;&|()":
            return
        if previous in b" \t":
            end = start - 1
            stop = end
            while stop > 0 and self.src[stop - 1 : stop] == b"\\":
                stop -= 1
            if (end - stop) % 2 == 0:
                return
        self.reasons.append("a `#` that bash may not read as a comment")

    def _for(self, node: Any) -> None:
        first = node.children[0].type if node.children else ""
        if first != "for":
            self.unsupported(f"`{first}`", node)
            return
        for child, field in _fielded(node):
            if not child.is_named:
                if child.type not in _CONTAINER_TOKENS:
                    self.unsupported(f"`{child.type}`")
                continue
            if field == "variable":
                continue
            if field == "body" or child.type == "do_group":
                self._statements(child)
            elif child.type == "comment":
                self._comment(child)
            else:
                self._argument(child)

    def _redirected(self, node: Any) -> None:
        redirects: list[str] = []
        body = None
        for child, field in _fielded(node):
            if field == "body":
                body = child
            elif child.type in ("file_redirect", "herestring_redirect", "heredoc_redirect"):
                redirects.append(self._redirect(child))
            elif child.type == "comment":
                self._comment(child)
            else:
                self.unsupported(f"`{child.type}` in a redirection", child)
        if body is None:
            if redirects:
                self._add([], redirects)
            return
        if body.type == "command":
            self._command(body, redirects, dash=node.id in self.dashes)
        else:
            self._statement(body)  # the group's redirection targets are checked as paths

    # -- simple commands -------------------------------------------------------

    def _command(self, node: Any, redirects: Sequence[str] = (), dash: bool = False) -> None:
        words: list[WordValue] = []
        texts: list[str] = []
        redirs = list(redirects)
        name_seen = False
        for child, field in _fielded(node):
            kind = child.type
            if kind == "variable_assignment":
                value = self._assignment(child)
                words.append(value)
                texts.append(self._shown(value, child))
            elif kind == "command_name":
                name_seen = True
                inner = child.named_children
                if len(inner) != 1:
                    self.unsupported("a command name the parser split", child)
                    continue
                value = self._value(inner[0])
                if not value.known or value.brace or has_glob(value):
                    self.unsupported(f"a computed command name `{self.text(child)}`", child)
                words.append(value)
                texts.append(self._shown(value, child))
                if "/" in value.chars and value.known:
                    self.paths.append(PathWord(value.chars))
            elif kind in ("file_redirect", "herestring_redirect", "heredoc_redirect"):
                redirs.append(self._redirect(child))
            elif kind == "comment":
                self._comment(child)
            elif child.is_named and field == "argument":
                value = self._argument(child)
                words.append(value)
                texts.append(self._shown(value, child))
            else:
                self.unsupported(f"`{self.text(child)}` in a command", child)
        if not name_seen and not words:
            if redirs:
                self._add([], redirs)
            return
        if dash:
            words.append(literal("-", False))
            texts.append("-")
        static = [w.chars if w.known else None for w in words]
        self._add_command(static, texts, redirs)

    def _add_command(
        self, static: list[str | None], texts: list[str], redirects: Sequence[str] = ()
    ) -> None:
        """Record a command from its words (``None``: not static) and look at what it runs."""
        text = " ".join([*texts, *redirects])
        known = [w for w in static if w is not None]
        words = tuple(known if len(known) == len(static) else texts)
        command = Command(words, text, prefix(known or texts))
        (self.nested if self.depth else self.commands).append(command)
        self._semantics(static, texts)

    def _add(self, texts: list[str], redirects: Sequence[str]) -> None:
        text = " ".join([*texts, *redirects])
        (self.nested if self.depth else self.commands).append(Command((), text, text))

    def _semantics(self, words: list[str | None], texts: list[str]) -> None:
        """What the command itself runs: code builtins, shells, and the command a wrapper runs
        (each rule is :mod:`.bashrules`'s)."""
        i = 0
        while i < len(words):
            word = words[i]
            if not ASSIGNMENT.match(word if word is not None else texts[i]):
                break
            i += 1
        if i >= len(words):
            return
        if i:  # `A=1 cmd` is also checked as `cmd`: a rule for cmd applies whatever the assignments
            self._inner(words[i:], texts[i:], "an assignment")
            return
        name = words[i]
        args = words[i + 1 :]
        if name is None:
            return  # already unsupported (a computed name)
        base = name.rsplit("/", 1)[-1]
        if _SUBSCRIPT_CODE.search(" ".join(w for w in words if w)):
            self.reasons.append("a subscript holding an expansion (bash may evaluate it)")
        reason = builtin_reason(name, args)
        if reason:
            pass
        elif base in ("declare", "typeset", "local", "readonly", "export"):
            reason = declare_reason([w for w in args if w is not None])
        elif base in ("cd", "pushd", "popd"):
            self._cd(base, args)
        elif base in SHELLS:
            reason = shell_reason(base, args)
        elif base in FIND:
            reason = self._find(args, texts[i + 1 :])
        elif base == "sed":
            reason = sed_reason(args)
        elif base in AWKS:
            reason = awk_reason(base, args)
        elif base in WRAPPERS:
            reason = self._wrapper(base, args, texts[i + 1 :])
        if reason:
            self.reasons.append(reason)

    def _inner(self, words: list[str | None], texts: list[str], via: str) -> None:
        if not words:
            return
        if words[0] is None:
            self.reasons.append(f"`{via}` runs a computed command")
            return
        self.depth += 1
        try:
            self._add_command(words, texts)
        finally:
            self.depth -= 1

    def _wrapper(self, name: str, args: list[str | None], texts: list[str]) -> str | None:
        start = wrapped(name, args)
        if not isinstance(start, int):
            return start
        inner, shown = args[start:], texts[start:]
        if name == "xargs" and not inner:
            inner, shown = ["echo"], ["echo"]
        if name == "xargs":
            # its input becomes arguments of the command: words no one can see beforehand
            self.unresolved.append(f"xargs {' '.join(shown)} (arguments read from its input)")
        self._inner(inner, shown, name)
        return None

    def _find(self, args: list[str | None], texts: list[str]) -> str | None:
        spans, reason = find_actions(args)
        for option, start, end in spans:
            if any(w is None or "{}" in w for w in args[start:end]):
                # each file find finds becomes an argument: names no one sees beforehand
                self.unresolved.append(f"find {option} {{}} (each file find finds)")
            self._inner(args[start:end], texts[start:end], f"find {option}")
        return reason

    def _cd(self, name: str, args: list[str | None]) -> None:
        operands = [w for w in args if w is None or not w.startswith("-") or w == "-"]
        if name == "popd" or (name == "pushd" and not operands):
            self.unresolved.append(name)
            return
        if not operands:
            if self.home:
                self.paths.append(PathWord(self.home))
            else:
                self.unresolved.append(f"{name} (HOME may be assigned by the line)")
            return
        target = operands[0]
        if target is None:
            return  # already unresolved
        if target == "-" or target.startswith(("+", "-")):
            self.unresolved.append(f"{name} {target}")
        elif (
            (os.environ.get("CDPATH") or "CDPATH" in self.assigned)
            and not target.startswith(("/", "./", "../"))
            and target not in (".", "..")
        ):
            self.unresolved.append(f"{name} {target} (CDPATH is set)")

    # -- other statements ---------------------------------------------------------

    def _assignments(self, node: Any) -> None:
        nodes = [node] if node.type == "variable_assignment" else list(node.named_children)
        static: list[str | None] = []
        texts: list[str] = []
        for child in nodes:
            if child.type != "variable_assignment":
                self.unsupported(f"`{child.type}` in an assignment", child)
                continue
            value = self._assignment(child)
            static.append(value.chars if value.known else None)
            texts.append(self._shown(value, child))
        if texts:
            self._add_command(static, texts)

    def _assignment(self, node: Any) -> WordValue:
        """``NAME=value`` (or ``+=``): the whole word; the value is checked as a path list."""
        name = ""
        op = ""
        value = WordValue()
        has_value = False
        for child, field in _fielded(node):
            if field == "name":
                if child.type != "variable_name":
                    self.unsupported(
                        "an array subscript assignment (bash evaluates the subscript)", child
                    )
                    return UNKNOWN
                name = self.text(child)
            elif not child.is_named and child.type in ("=", "+="):
                op = child.type
            elif child.type == "array":
                has_value = True
                value = value.add(self._array(child))
            elif child.is_named:
                has_value = True
                value = value.add(self._value(child))
            else:
                self.unsupported(f"`{child.type}` in an assignment", child)
        if not _NAME.match(name) or not op:
            self.unsupported("an assignment the parser split")
            return UNKNOWN
        if has_value:
            value = self._tilde(value, assignment=True)
            if value.known:
                for part in value.chars.split(":"):
                    self._path(part, value)
            else:
                self.unresolved.append(self.text(node))
        return literal(name + op, True).add(value)

    def _array(self, node: Any) -> WordValue:
        for child in node.named_children:
            if child.type == "comment":
                self._comment(child)
            else:
                self._argument(child)
        return WordValue("(…)", "qqq", False)

    def _declaration(self, node: Any) -> None:
        static: list[str | None] = []
        texts: list[str] = []
        for child in node.children:
            if not child.is_named:
                static.append(child.type)
                texts.append(child.type)
            elif child.type == "variable_assignment":
                value = self._assignment(child)
                static.append(value.chars if value.known else None)
                texts.append(self._shown(value, child))
            elif child.type == "variable_name":
                static.append(self.text(child))
                texts.append(self.text(child))
            else:
                value = self._argument(child)
                static.append(value.chars if value.known else None)
                texts.append(self._shown(value, child))
        self._add_command(static, texts)

    def _unset(self, node: Any) -> None:
        static: list[str | None] = []
        texts: list[str] = []
        for child in node.children:
            if not child.is_named:
                static.append(child.type)
                texts.append(child.type)
                continue
            if child.type == "variable_name":
                value = literal(self.text(child), True)
            else:
                value = self._value(child)
            if "[" in value.chars or not value.known:
                self.reasons.append("`unset` of an array element (bash evaluates the subscript)")
            static.append(value.chars if value.known else None)
            texts.append(self._shown(value, child))
        self._add_command(static, texts)

    def _test(self, node: Any) -> None:
        """``[ … ]`` and ``[[ … ]]``: a command whose words are the tokens."""
        double = bool(node.children) and node.children[0].type == "[["
        static: list[str | None] = []
        texts: list[str] = []

        def visit(n: Any) -> None:
            if not n.is_named:
                static.append(n.type)
                texts.append(n.type)
                return
            if n.type in (
                "binary_expression",
                "unary_expression",
                "parenthesized_expression",
                "postfix_expression",
                "ternary_expression",
            ):
                for c in n.children:
                    visit(c)
                return
            if n.type == "test_operator":
                op = self.text(n)
                if double and op in _ARITHMETIC_TESTS:
                    self.reasons.append(f"`[[ … {op} … ]]` evaluates its operands as arithmetic")
                static.append(op)
                texts.append(op)
                return
            if n.type in ("regex", "extglob_pattern"):
                static.append(self.text(n))
                texts.append(self.text(n))
                return
            if n.type == "comment":
                self._comment(n)
                return
            value = self._argument(n)
            static.append(value.chars if value.known else None)
            texts.append(self._shown(value, n))

        for child in node.children:
            visit(child)
        self._add_command(static, texts)

    # -- words ------------------------------------------------------------------

    def _argument(self, node: Any) -> WordValue:
        """A word in argument position: evaluated, then recorded as a path or as unresolved."""
        value = self._tilde(self._value(node))
        if value.brace:
            value = WordValue(value.chars, value.mask, False, True)
        if not value.known:
            if node.type != "process_substitution":
                self.unresolved.append(self.text(node))
            return value
        self._path(value.chars, value)
        if value.chars.startswith("-"):
            head, eq, tail = value.chars.partition("=")
            if eq:
                self._path(self._tilde_text(tail), value)
            if len(head) > 2 and not value.chars.startswith("--"):
                # a value glued to a cluster of short options (`sort -ro../F`, `tar -cf../F`):
                # any letter may be the one that takes it, so every tail is a path
                chars = value.chars
                for start in range(2, min(len(chars), _CLUSTER + 2)):
                    if chars[start - 1].isalnum():
                        self._path(self._tilde_text(chars[start:]), value)
        elif "=" in value.chars:
            tail = value.chars.partition("=")[2]
            self._path(self._tilde_text(tail), value)
        return value

    def _path(self, text: str, value: WordValue, redirect: bool = False) -> None:
        if text:
            glob = has_glob(value)
            self.paths.append(PathWord(text, glob, redirect, not glob or exact_glob(value)))

    def _redirect(self, node: Any) -> str:
        if node.type == "heredoc_redirect":
            return self._heredoc(node)
        if node.type == "herestring_redirect":
            for child in node.named_children:
                value = self._value(child)
                opaque = child.type in ("command_substitution", "string", "concatenation")
                if not value.known and not opaque:
                    self.unresolved.append(self.text(child))
            return self.text(node)
        fd = ""
        op = ""
        shown: list[str] = []
        for child in node.children:
            if child.type == "file_descriptor":
                fd = self.text(child)
            elif not child.is_named:
                if child.type not in _REDIRECT_OPS or self.text(child) != child.type:
                    self.unsupported(f"the redirection `{self.text(child)}`")
                op = child.type
            elif child.type == "comment":
                self._comment(child)
            else:
                value = self._tilde(self._value(child))
                if child.type == "process_substitution":
                    shown.append(self.text(child))
                    continue
                if not value.known or value.brace:
                    self.unresolved.append(self.text(child))
                    shown.append(self.text(child))
                    continue
                shown.append(quote(value.chars))
                if op in (">&", "<&") and _FD_TARGET.match(value.chars):
                    continue
                self._path(value.chars, value, redirect=True)
        if fd or op in (">&", "<&"):
            return f"{fd}{op}{''.join(shown)}"
        return f"{op} {' '.join(shown)}" if shown else op

    def _heredoc(self, node: Any) -> str:
        """``<<WORD`` / ``<<-WORD``: asks, and hides nothing when its delimiter is a plain word
        that bash and the parser both end the body at, and its body is data (a quoted
        delimiter, or no ``$``, backtick or backslash in it)."""
        self.soft.append("a heredoc")
        op, start, end, body = "", "", None, None
        for child in node.children:
            kind = child.type
            if kind == "heredoc_start":
                start = self.text(child)
            elif kind == "heredoc_end":
                end = child
            elif kind == "heredoc_body":
                body = child
            elif not child.is_named:
                if kind in ("<<", "<<-") and self.text(child) == kind:
                    op = op or kind
                elif kind not in _CONTAINER_TOKENS:
                    self.unsupported(f"`{kind}` after a heredoc")
            elif kind in ("file_redirect", "herestring_redirect"):
                self._redirect(child)
            elif kind == "comment":
                self._comment(child)
            elif kind in _STATEMENTS:
                self._statement(child)  # the rest of the line (`<<EOF > f && cmd`)
            else:
                self.unsupported(f"`{kind}` in a heredoc", child)
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)|'([A-Za-z0-9_.-]+)'|\"([A-Za-z0-9_.-]+)\"", start)
        if not op or match is None or end is None:
            self.unsupported("a heredoc the checker cannot delimit", node)
            return self.text(node)
        word = next(g for g in match.groups() if g)
        quoted = match.group(1) is None
        line_start = self.src.rfind(b"\n", 0, end.start_byte) + 1
        line_end = self.src.find(b"\n", end.end_byte)
        line = self.src[line_start : len(self.src) if line_end == -1 else line_end].decode(
            "utf-8", "surrogatepass"
        )
        text = self.text(body) if body is not None else ""
        lines = text.split("\n")
        strip = (lambda t: t.lstrip("\t")) if op == "<<-" else (lambda t: t)
        if self.text(end) != word or strip(line) != word or any(strip(t) == word for t in lines):
            self.unsupported("a heredoc whose end the parser may misplace", node)
        elif not quoted and any(c in text for c in "$`\\"):
            self.unsupported("a heredoc whose body bash expands", node)
        return f"{op}{start}"

    def _shown(self, value: WordValue, node: Any) -> str:
        return quote(value.chars) if value.known else self.text(node)

    def _value(self, node: Any) -> WordValue:
        kind = node.type
        if kind == "word":
            return self._word(node)
        if kind == "number":
            return literal(self.text(node), False)
        if kind == "raw_string":
            text = self.text(node)
            if len(text) < 2 or text[0] != "'" or text[-1] != "'":
                self.unsupported("a single-quoted string the parser split")
                return UNKNOWN
            return literal(text[1:-1], True)
        if kind == "string":
            return self._string(node)
        if kind == "concatenation":
            value = WordValue()
            for child in node.children:
                if not child.is_named:
                    self.unsupported(f"`{child.type}` inside a word")
                    return UNKNOWN
                value = value.add(self._value(child))
            return braces(value)
        if kind == "simple_expansion":
            return self._simple_expansion(node)
        if kind == "expansion":
            return self._expansion(node)
        if kind == "command_substitution":
            self._substitution(node)
            return UNKNOWN
        if kind == "process_substitution":
            self._substitution(node)
            return UNKNOWN
        if kind == "brace_expression":
            return WordValue(self.text(node), "u" * len(self.text(node)), False, True)
        if kind == "ansi_c_string":
            # Asks as a bash construct (fail closed), but its value is known for the path check.
            decoded = ansi_c(self.text(node))
            if decoded is None:
                self.unsupported("ANSI-C quoting $'…'")
                return UNKNOWN
            self.soft.append("ANSI-C quoting $'…'")
            return literal(decoded, True)
        if kind == "translated_string":
            self.unsupported('locale quoting $"…"', node)
            return UNKNOWN
        if kind == "arithmetic_expansion":
            self.unsupported("arithmetic expansion $(( … ))", node)
            return UNKNOWN
        if kind in ("extglob_pattern", "regex"):
            return WordValue(self.text(node), "u" * len(self.text(node)), False)
        self.unsupported(f"`{kind}` in a word", node)
        return UNKNOWN

    def _word(self, node: Any) -> WordValue:
        text = self.text(node)
        if text.startswith("#"):
            self.unsupported("a word starting with `#`")
            return UNKNOWN
        chars: list[str] = []
        mask: list[str] = []
        i = 0
        while i < len(text):
            c = text[i]
            if c == "\\":
                if i + 1 >= len(text):
                    self.unsupported("a trailing backslash")
                    return UNKNOWN
                nxt = text[i + 1]
                if nxt != "\n":
                    chars.append(nxt)
                    mask.append("q")
                i += 2
                continue
            if c in " \t\n;&|()<>$`'\"":
                self.unsupported(f"`{c}` inside a word the parser read")
                return UNKNOWN
            chars.append(c)
            mask.append("u")
            i += 1
        return WordValue("".join(chars), "".join(mask))

    def _string(self, node: Any) -> WordValue:
        children = node.children
        if len(children) < 2 or children[0].type != '"' or children[-1].type != '"':
            self.unsupported("a double-quoted string the parser split", node)
            return UNKNOWN
        value = WordValue()
        for child in children[1:-1]:
            kind = child.type
            if kind == "string_content":
                value = value.add(literal(dquote(self.text(child)), True))
            elif kind in (
                "simple_expansion",
                "expansion",
                "command_substitution",
                "arithmetic_expansion",
            ):
                text = self.text(child)
                blanks = text[: len(text) - len(text.lstrip(" \t\n"))]
                value = value.add(literal(blanks, True))  # the parser's opening token holds them
                inner = self._value(child)
                value = value.add(WordValue(inner.chars, "q" * len(inner.chars), inner.known))
            else:
                self.unsupported(f"`{kind}` inside double quotes", child)
                return UNKNOWN
        return value

    def _simple_expansion(self, node: Any) -> WordValue:
        names = node.named_children
        if len(names) != 1 or len(node.children) != 2 or node.children[0].type != "$":
            self.unsupported(f"the expansion `{self.text(node)}`", node)
            return UNKNOWN
        return self._variable(names[0])

    def _expansion(self, node: Any) -> WordValue:
        children = node.children
        if (
            len(children) == 3
            and children[0].type == "${"
            and children[2].type == "}"
            and children[1].type in ("variable_name", "special_variable_name")
        ):
            return self._variable(children[1])
        self.unsupported(f"the parameter expansion `{self.text(node)}`", node)
        return UNKNOWN

    def _variable(self, node: Any) -> WordValue:
        name = self.text(node)
        if node.type == "special_variable_name":
            if name in _NUMERIC_SPECIALS:
                return literal("0", True)  # a number: it cannot name another directory
            return UNKNOWN
        if node.type != "variable_name" or not (_NAME.match(name) or name.isdigit()):
            self.unsupported(f"the variable `{name}`")
            return UNKNOWN
        if name == "HOME" and self.home:
            return literal(self.home, True)
        if name == "PWD" and self.pwd:
            return literal(self.pwd, True)
        return UNKNOWN

    def _substitution(self, node: Any) -> None:
        if node.children and node.children[0].type == "`" and "\\" in self.text(node):
            self.unsupported("backticks holding backslashes (bash reads them again)")
        self.depth += 1
        try:
            self._statements(node)
        finally:
            self.depth -= 1

    def _tilde(self, value: WordValue, assignment: bool = False) -> WordValue:
        """Unquoted ``~``, ``~+``, ``~/…`` at the start (and after ``:`` in an assignment)."""
        if not value.known or not value.chars.startswith("~") or value.mask[:1] != "u":
            return value
        end = value.chars.find("/")
        end = len(value.chars) if end == -1 else end
        head = value.chars[:end]
        if value.mask[:end] != "u" * end:
            return value
        if head == "~" and self.home:
            expanded = self.home
        elif head == "~+" and self.pwd:
            expanded = self.pwd
        else:
            return WordValue(
                value.chars, value.mask, False, value.brace
            )  # ~-, ~user: not known here
        mask = "q" * len(expanded) + value.mask[end:]
        return WordValue(expanded + value.chars[end:], mask, True, value.brace)

    def _tilde_text(self, text: str) -> str:
        if (text == "~" or text.startswith("~/")) and self.home:
            return self.home + text[1:]
        if (text == "~+" or text.startswith("~+/")) and self.pwd:
            return self.pwd + text[2:]
        if text.startswith("~"):
            self.unresolved.append(text)
        return text


# --------------------------------------------------------------------------
# helpers


def _fielded(node: Any) -> list[tuple[Any, str | None]]:
    """``node``'s children with their field names."""
    out: list[tuple[Any, str | None]] = []
    cursor = node.walk()
    if cursor.goto_first_child():
        out.append((cursor.node, cursor.field_name))
        while cursor.goto_next_sibling():
            out.append((cursor.node, cursor.field_name))
    return out


def _wordlike(node: Any) -> bool:
    return node.type in _WORDLIKE or (not node.is_named and node.type == "$")


__all__ = ["Analysis", "Command", "PathWord", "analyse", "prefix", "quote", "BASH_ARITY"]
