"""`ragzoo.errors.one_line` / `error_line`: the one way a message becomes one short line (run records, logs, the
one-line refusals of numba and of the hub client)."""

from __future__ import annotations

from ragzoo.errors import error_line, one_line


def test_one_line_collapses_whitespace_and_cuts_with_an_ellipsis():
    assert one_line("a\n  b\tc\r\n") == "a b c"
    assert one_line("x" * 300) == "x" * 300
    assert one_line("x" * 301) == "x" * 299 + "…" and len(one_line("x" * 301)) == 300
    assert one_line("word " * 10, limit=9) == "word wor…"
    assert one_line("y" * 5000, limit=None) == "y" * 5000


def test_error_line_is_the_message_or_the_type_name():
    assert error_line(RuntimeError("cannot cache\n  function 'f'")) == "cannot cache function 'f'"
    assert error_line(MemoryError()) == "MemoryError"
    assert error_line(OSError("  \n ")) == "OSError"
    assert len(error_line(ValueError("z" * 1000))) == 200
    assert error_line(ValueError("z" * 1000), None) == "z" * 1000
