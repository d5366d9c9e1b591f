"""The one opener of an Optuna storage (`--storage`): a grid's shared cells (`ragzoo.grid.runner`) and a knob
search's trials (`ragzoo.optimizers.knob_search`) both come through here, so a bad URL, a missing driver, a server
that is not there or a file of the user's is refused the same way, in one line, before anything is written.

- None: in memory;
- `journal:PATH`: Optuna's journal file;
- an RDB URL (`sqlite:///s.db`, `postgresql://...`): SQLAlchemy. Workers started together race to create the
  schema; the losers retry, and for SQLite the workers of one machine take turns (`schema_lock`).
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

from ragzoo.errors import ConfigError

CONNECT_TIMEOUT = 10  # seconds a PostgreSQL server has to answer a connection (libpq's connect_timeout)
_LIBPQ_SCHEMES = ("postgresql", "postgres", "postgresql+psycopg", "postgresql+psycopg2")  # drivers that take it
# what a worker that lost the race to create the schema sees: retried, not refused
_TRANSIENT = ("already exists", "locked", "UNIQUE constraint", "Duplicate", "duplicate key")


def open_storage(url: str | None, **rdb_options):
    """An Optuna storage for `url`; `rdb_options` go to `RDBStorage` (heartbeats)."""
    import optuna

    if url is None:
        return optuna.storages.InMemoryStorage()
    from ragzoo.ownership import check_storage
    from ragzoo.secrets import register_url, strip_url

    check_storage(url)  # never Optuna's records appended to a user's file
    if url.startswith("journal:"):
        from optuna.storages.journal import JournalFileBackend

        return optuna.storages.JournalStorage(JournalFileBackend(url[len("journal:"):]))
    if "://" not in url:
        raise ConfigError(f"--storage {url!r}: give an Optuna storage URL, e.g. sqlite:///runs.db or "
                          f"journal:runs.log")
    register_url(url, paths=False)  # a database password is hidden from every output and record
    from ragzoo.ownership import sqlite_file

    database = sqlite_file(url)
    if database is not None and not Path(database).parent.is_dir():
        raise ConfigError(f"--storage {strip_url(url)}: the folder {Path(database).parent} does not exist; create "
                          f"it, or choose another path")
    from sqlalchemy.exc import ArgumentError, SQLAlchemyError

    if (url.partition(":")[0] in _LIBPQ_SCHEMES and "engine_kwargs" not in rdb_options
            and "connect_timeout" not in url.partition("?")[2]):  # the URL's own wins
        # a server that accepts the connection and never answers: one line after 10 s, not minutes of silence
        rdb_options = {**rdb_options, "engine_kwargs": {"connect_args": {"connect_timeout": CONNECT_TIMEOUT}}}
    for attempt in range(20):
        try:
            with schema_lock(url):
                return optuna.storages.RDBStorage(url, **rdb_options)
        except (ValueError, ArgumentError) as error:  # a URL SQLAlchemy cannot read (a port that is not a number)
            raise ConfigError(f"--storage {strip_url(url)}: not a database URL SQLAlchemy can read "
                              f"({database_error(error)}); "
                              f"e.g. postgresql://USER:PASSWORD@HOST:5432/DB") from None
        except ImportError:  # SQLAlchemy found no driver for the URL's database
            scheme = url.partition(":")[0]
            fix = ("pip install 'ragzoo[postgres]' (the psycopg driver)" if scheme in ("postgresql",
                   "postgresql+psycopg") else f"install the Python driver SQLAlchemy uses for {scheme}://")
            raise ConfigError(f"--storage {strip_url(url)}: no database driver for it here; {fix}") from None
        except SQLAlchemyError as error:  # a server not there, a login refused, a bad URL or scheme, a lost race
            if attempt == 19 or not any(text in str(error) for text in _TRANSIENT):
                raise ConfigError(f"--storage {strip_url(url)}: cannot connect or set up the database: "
                                  f"{database_error(error)}") from None
            time.sleep(0.1 + 0.05 * attempt)
    raise AssertionError("unreachable")


def database_error(error: BaseException) -> str:
    """The first line of what a database driver said (SQLAlchemy keeps the driver's own error in `orig`), redacted
    and bounded; the error's type where it said nothing."""
    from ragzoo.secrets import redact

    cause = getattr(error, "orig", None) or error
    lines = str(cause).strip().splitlines()
    return redact(lines[0] if lines else type(cause).__name__)[:300]


@contextlib.contextmanager
def schema_lock(url: str):
    """For a SQLite storage, workers on this machine create its schema (and a grid's study) one at a time: a
    kernel lock beside the database file; other databases handle that themselves (the opener retries)."""
    from ragzoo.ownership import sqlite_file

    database = sqlite_file(url)
    if database is None:
        yield
        return
    import fcntl

    path = Path(database + ".ragzoo-lock")
    with open(path, "a+") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
