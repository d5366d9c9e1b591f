"""The command dispatcher: fast help, one-line errors, exit codes."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from ragzoo import cli
from ragzoo.errors import ConfigError


def test_help_lists_every_command(capsys):
    assert cli.main([]) == 0
    out = capsys.readouterr().out
    for name in cli.COMMANDS:
        assert name in out


def test_help_does_not_import_heavy_libraries():
    probe = ("import sys\nfrom ragzoo import cli\n"
             "try:\n    cli.main(['--help'])\nexcept SystemExit:\n    pass\n"
             "heavy = [m for m in ('dspy', 'torch', 'litellm', 'sentence_transformers', 'bm25s') if m in sys.modules]\n"
             "print('HEAVY:' + ','.join(heavy))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.strip().splitlines()[-1] == "HEAVY:"


def test_help_is_fast():
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "ragzoo.cli", "--help"], capture_output=True, check=True)
    # generous bound for a loaded CI machine; benchmarks/startup.py measures the real figure (< 0.5 s)
    assert time.perf_counter() - started < 3.0


def test_python_dash_m_ragzoo_is_the_ragzoo_command():
    """`python -m ragzoo`, for a kernel or an unactivated venv whose scripts folder is not on PATH: the same
    parser, exit codes and one-line errors as the installed `ragzoo` script."""
    from ragzoo import __version__

    version = subprocess.run([sys.executable, "-m", "ragzoo", "--version"], capture_output=True, text=True)
    assert (version.returncode, version.stdout.strip()) == (0, f"ragzoo {__version__}")
    wrong = subprocess.run([sys.executable, "-m", "ragzoo", "no-such-command"], capture_output=True, text=True)
    assert wrong.returncode == 2 and "usage: ragzoo " in wrong.stderr and "Traceback" not in wrong.stderr


def test_unknown_command_exits_nonzero(capsys):
    with pytest.raises(SystemExit) as excinfo:
        cli.main(["no-such-command"])
    assert excinfo.value.code == 2


def test_ragzoo_error_becomes_one_line(monkeypatch, capsys):
    import types

    fake = types.ModuleType("fake_cmd")
    fake.add_arguments = lambda parser: None

    def run(args):
        raise ConfigError("knob 'k' must be an integer; pass --knob k=5")

    fake.run = run
    monkeypatch.setitem(sys.modules, "fake_cmd", fake)
    monkeypatch.setitem(cli.COMMANDS, "fake", ("fake_cmd", "a fake command"))
    assert cli.main(["fake"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "knob 'k' must be an integer" in err and "Traceback" not in err


def test_internal_error_is_one_line_without_debug(monkeypatch, capsys):
    import types

    fake = types.ModuleType("fake_cmd2")
    fake.add_arguments = lambda parser: None
    fake.run = lambda args: 1 / 0
    monkeypatch.setitem(sys.modules, "fake_cmd2", fake)
    monkeypatch.setitem(cli.COMMANDS, "fake2", ("fake_cmd2", "a failing command"))
    monkeypatch.delenv("RAGZOO_DEBUG", raising=False)
    assert cli.main(["fake2"]) == 1
    err = capsys.readouterr().err
    assert "ZeroDivisionError" in err and "RAGZOO_DEBUG" in err and err.count("\n") == 1
