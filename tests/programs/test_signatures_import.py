"""Signatures are declarations: importing them loads no LM factory, no LiteLLM, and leaves the environment
as it was."""

from __future__ import annotations

import json
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import ragzoo.signatures

SIGNATURE_MODULES = sorted(f"ragzoo.signatures.{m.name}" for m in pkgutil.iter_modules(ragzoo.signatures.__path__))

# one interpreter for both: the signature modules, reported, then the control (ragzoo.lm), reported again
PROBE = """
import importlib, json, os, sys
before = dict(os.environ)
cut = sys.argv.index("--")
for names in (sys.argv[1:cut], sys.argv[cut + 1:]):
    for name in names:
        importlib.import_module(name)
    print(json.dumps({"modules": sorted(m for m in sys.modules if m == "litellm" or m.startswith("litellm.")
                                        or m == "ragzoo.lm"),
                      "changed": sorted(k for k in set(before) | set(os.environ) if before.get(k) != os.environ.get(k)),
                      "loaded": [name for name in names if name in sys.modules]}))
"""


@pytest.fixture(scope="module")
def reports() -> list[dict]:
    """What importing every signature module did, then what importing ragzoo.lm after them did."""
    result = subprocess.run([sys.executable, "-c", PROBE, *SIGNATURE_MODULES, "--", "ragzoo.lm"], capture_output=True,
                            text=True, check=True, cwd=Path(__file__).parent, env=dict(os.environ))
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_the_probe_would_see_a_side_effect(reports):
    """The probe itself works: importing ragzoo.lm is reported (so an empty report below means something)."""
    assert reports[1]["loaded"] == ["ragzoo.lm"] and "ragzoo.lm" in reports[1]["modules"]


def test_importing_every_signature_module_has_no_side_effects(reports):
    assert len(SIGNATURE_MODULES) >= 6 and "ragzoo.signatures.common" in SIGNATURE_MODULES
    report = reports[0]
    assert report["loaded"] == SIGNATURE_MODULES
    assert report["modules"] == [], f"a signature module imported {report['modules']}"
    assert report["changed"] == [], f"importing signatures changed the environment: {report['changed']}"
