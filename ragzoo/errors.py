"""Typed exceptions. Every user mistake raises a subclass of `RagzooError`; the CLI turns it into one
line on stderr and a non-zero exit, never a traceback."""


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
