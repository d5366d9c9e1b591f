"""The `ragzoo` command.

Each subcommand lives in its own module under `ragzoo/commands/` with two functions,
`add_arguments(parser)` and `run(args) -> int`, and may say in `INTERRUPTED` what Ctrl-C leaves kept;
helpers shared by several subcommands (LM, retriever, questions, program, dataset defaults) live in
`ragzoo/commands/common.py`. Only the module of the subcommand
being run is imported, so `ragzoo --help` never pays for DSPy, torch or LiteLLM.

Every parser (top level, subcommands, and their own subparsers) is a `Parser`: no abbreviated flags
(`--data` is never read as `--dataset`), and `--help` shows each flag's default.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys

# name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "datasets": ("ragzoo.commands.datasets", "list every dataset, split and size ragzoo can load"),
    "methods": ("ragzoo.commands.methods", "list methods, their papers, knobs and LM calls per question"),
    "optimizers": ("ragzoo.commands.optimizers", "list optimizer presets"),
    "corpus": ("ragzoo.commands.corpus", "fetch a corpus by name (wiki17-abstracts, wiki18-100w) and list corpora"),
    "index": ("ragzoo.commands.index", "build a retrieval index over a corpus"),
    "search": ("ragzoo.commands.search", "query a retriever"),
    "serve": ("ragzoo.commands.serve", "serve a retriever over the ColBERTv2 REST API"),
    "ask": ("ragzoo.commands.ask", "answer one question with a method or a compiled program"),
    "compile": ("ragzoo.commands.compile", "compile a method's prompts with a DSPy optimizer and save it"),
    "evaluate": ("ragzoo.commands.evaluate", "evaluate a method or compiled program on a dataset"),
    "report": ("ragzoo.commands.report", "tabulate (and plot) finished runs"),
    "sweep": ("ragzoo.commands.sweep", "run a grid of methods x datasets x optimizers x LMs (priced, resumable)"),
    "reproduce": ("ragzoo.commands.reproduce", "run a bundled grid: a paper's main table, its numbers beside ours"),
}


def _version() -> str:
    from ragzoo import __version__

    return __version__


class HelpFormatter(argparse.HelpFormatter):
    """Appends "(default: X)" to a flag's help when argparse holds a real default and the help does not
    already say it. Commands whose defaults depend on other flags (resolved with `--config`) write them in
    the help text themselves."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if ("default" in text or default in (None, False, [], argparse.SUPPRESS) or not action.option_strings
                or isinstance(action, (argparse._HelpAction, argparse._VersionAction))):
            return text
        return f"{text} (default: %(default)s)" if text else "default: %(default)s"


class Parser(argparse.ArgumentParser):
    """An ArgumentParser that never accepts abbreviated flags and shows defaults in `--help`. Subparsers
    (`add_subparsers().add_parser`) are of the same class, so commands' own subcommands inherit both."""

    def __init__(self, *args, **kwargs):
        kwargs["allow_abbrev"] = False
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)


def build_parser(command: str | None = None) -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    parser = Parser(
        prog="ragzoo",
        description="Retrieval-augmented QA methods as compiled DSPy programs.",
    )
    parser.add_argument("--version", action="version", version=f"ragzoo {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers = {}
    for name, (_module, help_text) in COMMANDS.items():
        subparsers[name] = sub.add_parser(name, help=help_text, description=help_text)
    if command in COMMANDS:
        module = importlib.import_module(COMMANDS[command][0])
        module.add_arguments(subparsers[command])
    return parser, subparsers


def _chosen_command(argv: list[str]) -> str | None:
    for token in argv:
        if not token.startswith("-"):
            return token
    return None


def main(argv: list[str] | None = None) -> int:
    argv_given = argv
    argv = list(sys.argv[1:] if argv is None else argv)
    command = _chosen_command(argv)
    parser, _ = build_parser(command)
    args = parser.parse_args(argv)
    args.argv = argv  # the command line as given: a stopped command names the one that resumes it
    if args.command is None:
        parser.print_help()
        return 0
    from ragzoo.errors import RagzooError
    from ragzoo.secrets import RedactingStream

    module = importlib.import_module(COMMANDS[args.command][0])
    streams = (sys.stdout, sys.stderr)
    sys.stdout, sys.stderr = RedactingStream(sys.stdout), RedactingStream(sys.stderr)
    try:
        code = _run(module, args)
    except SystemExit as ending:  # SIGTERM's: the process ends, as it would have without ragzoo's cleanup first
        if argv_given is None:
            _leave_stuck_threads(ending.code)
        from ragzoo.errors import STOPPING

        STOPPING.clear()
        raise
    finally:
        sys.stdout, sys.stderr = streams
    if argv_given is None:  # the `ragzoo` process itself (not a caller's `main([...])`): it ends once stopped
        _leave_stuck_threads(code)
    from ragzoo.errors import STOPPING

    STOPPING.clear()  # a library caller's process goes on: its own LM calls after this command are not refused
    return code


STUCK_GRACE = 2.0  # seconds a stopped command's other threads get to end before the process leaves them


def _leave_stuck_threads(code: int) -> None:
    """A stopped command (Ctrl-C, SIGTERM) ends its process even where a thread it could not interrupt is still
    inside a call to a hung LM: the interpreter's exit would join such a non-daemon thread (a DSPy optimizer's
    pool, a thread pool's worker) until the LM's own timeout, minutes after the command said it stopped. Its other
    threads have `STUCK_GRACE` seconds; then the process exits with the command's status, its streams flushed."""
    import threading
    import time

    from ragzoo.errors import STOPPING, Terminated

    if code not in (130, Terminated.exit_code) or not STOPPING.is_set():
        return
    ends = time.monotonic() + STUCK_GRACE
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join(max(0.0, ends - time.monotonic()))
    if any(thread.is_alive() and not thread.daemon and thread is not threading.current_thread()
           for thread in threading.enumerate()):
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)


@contextlib.contextmanager
def _sigterm_as_interrupt(module):
    """While a command runs in the main thread, SIGTERM raises `Terminated` (a KeyboardInterrupt): it stops as on
    Ctrl-C, with the same cleanup and the same line of what was kept, instead of SIGTERM's default death (status
    143, nothing said, no cleanup). Yields whether it did (it then owns the signal: `_run` ends the process with
    status 143 once the command stopped, as SIGTERM's default action would have, also for a library caller). Not
    where a handler is already on (a grid's, for the cells it runs in this process; a caller's own) or where the
    command handles SIGTERM its own way (`HANDLES_SIGTERM`: serve exits 0)."""
    import signal
    import threading

    from ragzoo.errors import raise_terminated

    if getattr(module, "HANDLES_SIGTERM", False) or threading.current_thread() is not threading.main_thread() \
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield False
        return
    previous = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield True
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def _one_line_warnings(command: str):
    """While a command runs, a warning of ragzoo's own (`errors.RagzooWarning`) is one line on stderr, as its errors
    are; any other warning is shown as before."""
    import warnings

    from ragzoo.errors import RagzooWarning

    shown = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if isinstance(category, type) and issubclass(category, RagzooWarning):
            print(f"ragzoo {command}: warning: {message}", file=sys.stderr)
        else:
            shown(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = shown


def _run(module, args) -> int:
    from ragzoo.errors import Terminated

    owns_sigterm: list[bool] = []
    with _one_line_warnings(args.command):
        code = _run_command(module, args, owns_sigterm)
    if code == Terminated.exit_code and any(owns_sigterm):
        sys.stderr.flush()
        raise SystemExit(code)  # the process ends on SIGTERM, as it would have without ragzoo's cleanup first
    return code


def _run_command(module, args, owns_sigterm: list[bool]) -> int:
    from ragzoo.errors import STOPPING, RagzooError, Terminated

    STOPPING.clear()  # a command starts (a library caller may run several in one process)
    try:
        with _sigterm_as_interrupt(module) as owned:
            owns_sigterm.append(owned)
            return int(module.run(args) or 0)
    except RagzooError as error:
        print(f"ragzoo {args.command}: error: {error}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt as stop:
        STOPPING.set()  # also where the signal came through a handler of the command's own (a grid's)
        kept = getattr(module, "INTERRUPTED", "nothing was written")
        code = getattr(stop, "exit_code", 130)  # `Terminated`: SIGTERM
        print(f"ragzoo {args.command}: {'stopped (SIGTERM)' if code == Terminated.exit_code else 'interrupted'}; "
              f"{kept}", file=sys.stderr)
        return code
    except BrokenPipeError:
        return 0
    except OSError as error:  # unreadable input, read-only or full disk: the user's environment, not a bug
        if os.environ.get("RAGZOO_DEBUG"):
            raise
        print(f"ragzoo {args.command}: error: {_os_error_line(error)}", file=sys.stderr)
        return 2
    except RecursionError:
        if os.environ.get("RAGZOO_DEBUG"):
            raise
        print(f"ragzoo {args.command}: error: an input file is nested too deeply to be a ragzoo file (a JSON "
              f"value hundreds of levels deep); check the files this command reads", file=sys.stderr)
        return 2
    except Exception as error:  # a bug of ours, not a user mistake: still one line unless asked for more
        if os.environ.get("RAGZOO_DEBUG"):
            raise
        print(f"ragzoo {args.command}: internal error: {type(error).__name__}: {error} "
              f"(set RAGZOO_DEBUG=1 for the traceback)", file=sys.stderr)
        return 1


def _os_error_line(error: OSError) -> str:
    """One line for an OSError: what failed, on which path, and what to do."""
    import errno

    where = f" {error.filename}" if error.filename else ""
    reason = " ".join((error.strerror or str(error) or type(error).__name__).split())  # one line, whatever it said
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        advice = "free some disk space (finished work is kept; rerun with --resume where supported)"
    elif error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        advice = "check its permissions, or choose another path"
    elif error.errno in (errno.EISDIR, errno.ENOTDIR):
        advice = "a file was expected where there is a folder (or the reverse); check the path"
    elif error.errno == errno.ENOENT:
        advice = "check the path"
    else:
        advice = "check the path and the disk"
    return f"cannot use{where}: {reason}; {advice}"

if __name__ == "__main__":
    sys.exit(main())
