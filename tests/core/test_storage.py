"""`--storage` (a grid's shared cells, a knob search's trials) opens through one routine, `ragzoo.storage`: a bad
URL, a scheme with no driver, a server that is not there or a missing folder is refused in one line (review: an
"internal error" of SQLAlchemy's, over several lines, for a compile's search), before anything is written."""

from __future__ import annotations

import socket

import pytest

from ragzoo.errors import ConfigError
from ragzoo.storage import open_storage


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize("url, says", [
    ("bogus://x", "not a database URL SQLAlchemy can read (Can't load plugin: sqlalchemy.dialects:bogus)"),
    ("notaurl", "give an Optuna storage URL"),
    ("sqlite:///{tmp}/no/such/dir/s.db", "the folder {tmp}/no/such/dir does not exist"),
    ("postgresql://u:secretpw@127.0.0.1:{port}/db", "cannot connect or set up the database"),
])
def test_a_storage_that_cannot_be_opened_is_refused_in_one_line(tmp_path, url, says):
    url = url.format(tmp=tmp_path, port=_closed_port())
    try:
        import psycopg  # noqa: F401
    except ImportError:
        if url.startswith("postgresql"):
            says = "no database driver for it here"
    with pytest.raises(ConfigError) as refused:
        open_storage(url)
    message = str(refused.value)
    assert says.format(tmp=tmp_path) in message and "\n" not in message and "secretpw" not in message


def test_a_sqlite_storage_in_an_existing_folder_opens_and_reopens(tmp_path):
    import optuna

    url = f"sqlite:///{tmp_path}/s.db"
    optuna.create_study(storage=open_storage(url), study_name="s")
    assert [study.study_name for study in optuna.get_all_study_summaries(open_storage(url))] == ["s"]


def test_a_url_with_a_bad_port_is_one_line_and_a_silent_server_is_given_up_on(tmp_path, monkeypatch):
    """Review (PostgreSQL): `...@127.0.0.1:notaport/db` was an "internal error: ValueError", and a server that
    accepts the connection and never answers held the command silent for 132 s."""
    pytest.importorskip("psycopg")
    import threading
    import time

    from ragzoo import storage

    for url in ("postgresql://u:secretpw@127.0.0.1:notaport/db", "postgresql://u:secretpw@[::1:5432/db"):
        with pytest.raises(ConfigError) as refused:
            open_storage(url)
        assert "not a database URL" in str(refused.value) and "secretpw" not in str(refused.value)
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # accepts (the kernel's backlog) and never says a word
    held: list = []
    threading.Thread(target=lambda: held.append(silent.accept()), daemon=True).start()
    monkeypatch.setattr(storage, "CONNECT_TIMEOUT", 2)
    started = time.monotonic()
    try:
        with pytest.raises(ConfigError) as refused:
            open_storage(f"postgresql://u:secretpw@127.0.0.1:{silent.getsockname()[1]}/db")
    finally:
        silent.close()
    assert time.monotonic() - started < 20 and "cannot connect" in str(refused.value)


def test_a_connect_timeout_in_the_url_is_the_user_s(monkeypatch):
    """Diff review: ragzoo's 10 s default replaced a `?connect_timeout=60` the URL gave (SQLAlchemy lets
    connect_args win over the URL's query)."""
    import optuna

    seen = []

    def capture(url, **options):
        seen.append(options)
        return object()

    monkeypatch.setattr(optuna.storages, "RDBStorage", capture)
    open_storage("postgresql://u:pw@127.0.0.1:5432/db?connect_timeout=60")
    open_storage("postgresql://u:pw@127.0.0.1:5432/db")
    assert "engine_kwargs" not in seen[0]
    assert seen[1]["engine_kwargs"] == {"connect_args": {"connect_timeout": 10}}
