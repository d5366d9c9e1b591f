"""Typed exceptions. Every user mistake raises a subclass of `RagzooError`; the CLI turns it into one
line on stderr and a non-zero exit, never a traceback."""

import threading


def one_line(text, limit: int | None = 300) -> str:
    """A message as one short line: a library's may run over several (a hub's HTTP error, numba's), and a run
    record or a log line never holds an example's whole content. Whitespace collapsed, cut at `limit` (None: not
    cut) with an ellipsis."""
    line = " ".join(str(text).split())
    return line if limit is None or len(line) <= limit else line[: limit - 1] + "…"


def error_line(error: BaseException, limit: int | None = 200) -> str:
    """`error`'s message as one line (`one_line`), or its type's name where it has none."""
    return one_line(error, limit) or type(error).__name__


class RagzooError(Exception):
    """Base class of every error ragzoo raises for bad input or an unusable environment."""

    exit_code = 2


class ConfigError(RagzooError):
    """A bad flag, knob, spec string or config file."""


class DataError(RagzooError):
    """A dataset or corpus that is missing, malformed or unknown."""


class RetrieverError(RagzooError):
    """A retriever that cannot answer: unreachable server, error payload, bad k, stale index."""


class LMError(RagzooError):
    """A language model that cannot be built or reached."""


class ArtifactError(RagzooError):
    """A compiled-program artifact that is missing, corrupt, edited or of another version."""


class RunError(RagzooError):
    """A run directory that cannot be written or resumed."""


class BudgetExceeded(RagzooError):
    """A --max-calls / --max-cost budget was reached."""


class RagzooWarning(UserWarning):
    """A warning of ragzoo's own (an artifact compiled under another DSPy minor version): the CLI says it in one line,
    `ragzoo COMMAND: warning: ...`, not as Python's two lines with the source line that warned."""


class Terminated(KeyboardInterrupt):
    """SIGTERM (a scheduler, `kill`, a container's stop): the command stops as on Ctrl-C (every `except
    KeyboardInterrupt` path runs: what finished is kept, said in one line), and exits 143 rather than 130."""

    exit_code = 143


def raise_terminated(signum, frame) -> None:
    """The SIGTERM handler of a command the CLI runs (`ragzoo.cli`): stop as on Ctrl-C. A grid takes SIGTERM over
    for its cells only where this handler is on (the CLI's choice), not in a library caller's process."""
    raise Terminated


class Stopping(KeyboardInterrupt):
    """An LM call refused because the command the CLI runs is stopping (`STOPPING`): a KeyboardInterrupt, so that
    no question or compile step records it as its failure."""


# Set by the CLI once a command it runs was stopped (Ctrl-C, SIGTERM; cleared when the next starts): from then on every
# metered LM call refuses (`usage.BudgetedCalls`). A thread a signal cannot reach (a DSPy optimizer's pool, a
# compile's scoring threads) thus sends nothing more and ends at its next call, instead of working through its
# queue at the LM after the command said it stopped.
STOPPING = threading.Event()
