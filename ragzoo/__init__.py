"""ragzoo: retrieval-augmented QA methods as compiled DSPy programs.

Imports are lazy so that `import ragzoo` and `ragzoo --help` stay fast; `ragzoo.load` and friends
pull in DSPy on first use.
"""

from __future__ import annotations

from ragzoo import ast_guard

__version__ = "0.1.0"

ast_guard.install()

__all__ = ["__version__", "configure", "load", "make_lm", "save"]


def __getattr__(name: str):
    if name in ("load", "save"):
        from ragzoo import artifacts

        return getattr(artifacts, name)
    if name in ("configure", "make_lm"):
        from ragzoo import lm

        return getattr(lm, name)
    raise AttributeError(f"module 'ragzoo' has no attribute {name!r}")
