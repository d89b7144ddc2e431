"""``bash``: run a shell command in the session's working directory.

Contract:

* ``bash -c <command>`` in ``ctx.directory``, stdin closed, stdout and stderr
  merged (so they interleave as in a terminal), in a new session so the
  command and everything it starts form one process group.
* ``timeout`` is in ms: default 120 000, values above 600 000 are clamped.
  On timeout the whole group gets SIGTERM, then SIGKILL after 200 ms; the
  output so far is returned with a line saying it timed out.
* The call ends when the shell exits: background jobs it left running keep
  running, but we stop reading their output shortly after.
* ``KeyboardInterrupt`` (notebook interrupt) kills the group, then re-raises.
* A non-zero exit is not a tool failure: the output ends with the exit code
  and ``metadata["exit"]`` has it (negative: killed by that signal).
* ``metadata["output"]`` (for the UI) is capped at 30 000 characters, OpenCode's limit for bash.
* Inside a session the command runs in the OS sandbox (``tools/sandbox.py``: read-only file
  system but the session folder, a private ``/tmp`` and allowed folders; credentials
  hidden; no network unless allowed); where there is none, the first call's output ends
  with one line saying why (and the permission defaults ask before every command).
* Memory stays bounded whatever the command prints: the output streams into a
  :class:`~.truncation.OutputSpool`, which keeps a head and a tail in memory and, past
  2,000 lines or 50 KB, writes the full output to the saved file as it arrives.
"""

from __future__ import annotations

import codecs
import os
import selectors
import signal
import subprocess
import time

from ..core.errors import ToolFailure
from .base import ToolContext, ToolResult
from .sandbox import environment, note, seccomp_fd, wrap
from .truncation import OutputSpool

DEFAULT_TIMEOUT_MS = 120_000
MAX_TIMEOUT_MS = 600_000
MAX_METADATA_LENGTH = 30_000
KILL_GRACE_S = 0.2  # SIGTERM → SIGKILL
DRAIN_S = 0.5  # how long to keep reading after the shell is gone

# Pagers and prompts would wait forever on a closed stdin.
_ENV_OVERRIDES = {"PAGER": "cat", "GIT_PAGER": "cat", "GIT_TERMINAL_PROMPT": "0", "TERM": "dumb"}


class BashTool:
    name = "bash"
    description = (
        "Run a bash command in the working directory and return its combined stdout and "
        "stderr. Use for shell tasks: git, pip, running scripts, file operations. "
        "Commands cannot read input. Default timeout 2 minutes."
    )
    parameters = {
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "The command to run"},
            "timeout": {
                "type": "integer",
                "description": "Timeout in milliseconds (default 120000, max 600000)",
            },
            "description": {
                "type": "string",
                "description": "What the command does, in 5-10 words",
            },
        },
        "required": ["command"],
    }

    def run(self, args: dict, ctx: ToolContext) -> ToolResult:
        command = args["command"]
        timeout_ms = args.get("timeout", DEFAULT_TIMEOUT_MS)
        if timeout_ms <= 0:
            raise ToolFailure(
                f"bash: timeout must be a positive number of milliseconds, got {timeout_ms}"
            )
        timeout_ms = min(timeout_ms, MAX_TIMEOUT_MS)
        if not os.path.isdir(ctx.directory):
            raise ToolFailure(f"bash: working directory {ctx.directory} does not exist")

        argv = ["bash", "-c", command]
        confinement = ctx.sandbox
        first_note = ""
        env = {**os.environ, **_ENV_OVERRIDES}
        seccomp: int | None = None
        if confinement is not None and confinement.enabled:
            seccomp = seccomp_fd()
            argv = wrap(argv, str(ctx.directory), confinement, seccomp)
            env = {**environment(os.environ), **_ENV_OVERRIDES}
        elif confinement is not None:
            first_note = _first_unconfined(confinement)
        try:
            proc = subprocess.Popen(
                argv,
                cwd=ctx.directory,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=env,
                pass_fds=() if seccomp is None else (seccomp,),
            )
        finally:
            if seccomp is not None:
                os.close(seccomp)
        spool = OutputSpool(ctx.data_dir)
        try:
            timed_out = _pump(proc, timeout_ms / 1000, spool)
        except BaseException:
            # KeyboardInterrupt above all: leave no orphaned children behind.
            _kill_group(proc)
            spool.close()
            raise
        finally:
            assert proc.stdout is not None  # started with stdout=PIPE
            proc.stdout.close()

        notes = []
        if timed_out:
            notes.append(f"(Command timed out after {timeout_ms} ms and was killed)")
        elif proc.returncode:
            notes.append(f"(exit code {proc.returncode})")
        if first_note:
            notes.append(first_note)
        head = spool.head
        if not head and not notes:
            spool.write("(no output)")
        cut = spool.result("\n\n".join(notes))

        preview = head
        if len(preview) > MAX_METADATA_LENGTH or cut.truncated:
            preview = preview[:MAX_METADATA_LENGTH] + "\n\n..."
        metadata = {
            "output": preview,
            "exit": proc.returncode,
            "description": args.get("description", ""),
            "timedOut": timed_out,
            "truncated": cut.truncated,  # cut here, not again by run_tool
        }
        if confinement is not None:
            metadata["sandbox"] = (
                {"network": confinement.network, "writable": list(confinement.writable)}
                if confinement.enabled
                else {"off": confinement.reason}
            )
        if cut.truncated:
            metadata["outputPath"] = cut.output_path
        return ToolResult(
            output=cut.content, title=args.get("description") or command, metadata=metadata
        )


_told: set[str] = set()  # reasons already shown (once per process)


def _first_unconfined(confinement: object) -> str:
    """The one line saying there is no sandbox, at the first unconfined call only."""
    reason = str(getattr(confinement, "reason", ""))
    if reason in _told:
        return ""
    _told.add(reason)
    return note(confinement)  # type: ignore[arg-type]


def _pump(proc: subprocess.Popen, timeout_s: float, spool: OutputSpool) -> bool:
    """Read the merged output into ``spool`` until EOF, the shell's exit or the timeout.

    Single-threaded with a selector, so an interrupt lands here and nothing is
    left reading in the background. Returns whether it timed out.
    """
    assert proc.stdout is not None  # started with stdout=PIPE
    fd = proc.stdout.fileno()
    os.set_blocking(fd, False)
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    timed_out = False
    deadline = time.monotonic() + timeout_s
    stop_at: float | None = None  # set once the shell is gone: drain until then
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while True:
            now = time.monotonic()
            if stop_at is None:
                if proc.poll() is not None:
                    stop_at = now + DRAIN_S
                elif now >= deadline:
                    timed_out = True
                    _kill_group(proc)
                    stop_at = time.monotonic() + DRAIN_S
            limit = stop_at if stop_at is not None else deadline
            if stop_at is not None and now >= stop_at:
                break
            if sel.select(timeout=max(0.0, min(0.1, limit - now))):
                try:
                    data = os.read(fd, 65536)
                except BlockingIOError:
                    continue
                if not data:  # EOF: every writer closed the pipe
                    break
                spool.write(decoder.decode(data))
    if proc.poll() is None:
        # The pipe closed but the shell lives on (it closed its stdout):
        # wait out the rest of the timeout.
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc)
    spool.write(decoder.decode(b"", final=True))
    return timed_out


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGTERM the process group, then SIGKILL it after a grace period.

    The SIGKILL goes out even when the shell died of the SIGTERM, because its
    children may ignore SIGTERM.
    """
    _signal_group(proc, signal.SIGTERM)
    try:
        proc.wait(timeout=KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    _signal_group(proc, signal.SIGKILL)
    proc.wait()


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass  # the whole group is already gone
