"""Signatures are declarations: importing them loads no LM factory, no LiteLLM, and leaves the environment
as it was."""

from __future__ import annotations

import json
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import ragzoo.signatures

SIGNATURE_MODULES = sorted(f"ragzoo.signatures.{m.name}" for m in pkgutil.iter_modules(ragzoo.signatures.__path__))

PROBE = """
import importlib, json, os, sys
before = dict(os.environ)
for name in sys.argv[1:]:
    importlib.import_module(name)
print(json.dumps({"modules": sorted(m for m in sys.modules if m == "litellm" or m.startswith("litellm.")
                                    or m == "ragzoo.lm"),
                  "changed": sorted(k for k in set(before) | set(os.environ) if before.get(k) != os.environ.get(k)),
                  "loaded": [name for name in sys.argv[1:] if name in sys.modules]}))
"""


def test_the_probe_would_see_a_side_effect():
    """The probe itself works: importing ragzoo.lm is reported (so an empty report below means something)."""
    result = subprocess.run([sys.executable, "-c", PROBE, "ragzoo.lm"], capture_output=True, text=True,
                            check=True, cwd=Path(__file__).parent, env=dict(os.environ))
    assert "ragzoo.lm" in json.loads(result.stdout)["modules"]


def test_importing_every_signature_module_has_no_side_effects():
    assert len(SIGNATURE_MODULES) >= 6 and "ragzoo.signatures.common" in SIGNATURE_MODULES
    result = subprocess.run([sys.executable, "-c", PROBE, *SIGNATURE_MODULES], capture_output=True, text=True,
                            check=True, cwd=Path(__file__).parent, env=dict(os.environ))
    report = json.loads(result.stdout)
    assert report["loaded"] == SIGNATURE_MODULES
    assert report["modules"] == [], f"a signature module imported {report['modules']}"
    assert report["changed"] == [], f"importing signatures changed the environment: {report['changed']}"
