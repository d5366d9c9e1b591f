"""A guard for a CPython race that loses questions under threads (CPython gh-106905).

CPython 3.11.0-3.11.7 and 3.12.0-3.12.1 keep the AST constructor's recursion counter in state shared by every
thread. When garbage collection runs a finaliser that yields the GIL while one thread turns a parse tree into
Python objects, and another thread parses meanwhile, the first parse fails with `SystemError: AST constructor
recursion depth mismatch`. DSPy parses in the threads ragzoo runs questions in: `ast.literal_eval` reads typed
output fields (lists, booleans, literals) and a string signature is parsed whenever a `dspy.Predict` is built.
The error is not the model's and not the question's, yet it fails the call. CPython 3.11.8 and 3.12.2 fixed it
(each call keeps its own counter).

On an affected interpreter `install` wraps `ast.parse` (which `ast.literal_eval` calls through the module's
global) in one re-entrant lock, so no two threads build parse trees at once. Parsing holds the GIL anyway, so
the lock costs no parallelism. One thread can still race itself: a finaliser the collector runs inside a parse
may parse too (the re-entrant lock lets it, as it must); the outer parse then fails the same way and is redone
(at most twice more). A fork (a grid cell's `--processes` workers, forked while other cells' threads
read answers) takes the lock first and the child starts with a fresh one: a lock held by a thread the child
does not have would hang its first parse for ever. On a fixed interpreter nothing is touched.
"""

from __future__ import annotations

import ast
import functools
import os
import sys
import threading

_GUARD_MARK = "_ragzoo_one_parse_at_a_time"
_ATTEMPTS = 3
FORK_WAIT = 5.0  # seconds a fork waits for a parse in another thread to end
# Re-entrant: a finaliser run by the garbage collector inside a parse may itself parse, on the same thread.
_PARSE_LOCK = threading.RLock()


def affected(version: tuple[int, ...] = tuple(sys.version_info[:3])) -> bool:
    """Whether this CPython shares the AST constructor's recursion counter between threads."""
    major, minor, micro = version[:3]
    return (major, minor) == (3, 11) and micro < 8 or (major, minor) == (3, 12) and micro < 2


def install() -> bool:
    """Serialise `ast.parse` on an affected interpreter; returns whether the guard is in force."""
    if sys.implementation.name != "cpython" or not affected():
        return False
    if getattr(ast.parse, _GUARD_MARK, False):
        return True
    unguarded = ast.parse

    @functools.wraps(unguarded)
    def parse(*args, **kwargs):
        with _PARSE_LOCK:
            for attempt in range(_ATTEMPTS):
                try:
                    return unguarded(*args, **kwargs)
                except SystemError as error:
                    # the same race on one thread: a finaliser the collector ran inside this parse parsed too
                    # (the lock lets it in, as it must): the parse is redone, its garbage already collected
                    if attempt == _ATTEMPTS - 1 or "recursion depth mismatch" not in str(error):
                        raise

    setattr(parse, _GUARD_MARK, True)
    ast.parse = parse
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(before=_hold_for_fork, after_in_parent=_release_after_fork, after_in_child=_fresh_lock)
    return True


_held_for_fork = threading.local()


# the lock as it is when the hook runs (a forked child's own, not the one it was born with); with a bound: a hook
# registered after ours (logging's) runs before it and holds its own lock, which a finaliser inside another
# thread's parse may wait for, and the child starts with a fresh lock either way
def _hold_for_fork() -> None:
    _held_for_fork.lock = _PARSE_LOCK if _PARSE_LOCK.acquire(timeout=FORK_WAIT) else None


def _release_after_fork() -> None:
    lock = getattr(_held_for_fork, "lock", None)
    _held_for_fork.lock = None
    if lock is not None:
        lock.release()


def _fresh_lock() -> None:
    global _PARSE_LOCK
    _PARSE_LOCK = threading.RLock()
