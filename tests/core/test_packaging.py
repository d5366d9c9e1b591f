"""The package installs under one namespace, from a regular wheel, and imports from outside the checkout."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SUBPACKAGES = ["ragzoo", "ragzoo.programs", "ragzoo.signatures", "ragzoo.optimizers", "ragzoo.metrics",
               "ragzoo.retrieval", "ragzoo.data", "ragzoo.commands", "ragzoo.grid"]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(REPO), "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(out)], check=True, cwd=out, capture_output=True)
    (wheel_path,) = out.glob("ragzoo-*.whl")
    return wheel_path


def test_wheel_puts_every_folder_under_the_ragzoo_namespace(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top_levels = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert top_levels == {"ragzoo"}
    for folder in ("programs", "signatures", "optimizers", "metrics"):
        assert f"ragzoo/{folder}/__init__.py" in names
    assert "ragzoo/grid/grids/blendfilter-table2.toml" in names  # the bundled grids are package data
    assert {"ragzoo/demo_data/SOURCES.md", "ragzoo/demo_data/hotpotqa/corpus_wiki17_abstracts.jsonl",
            "ragzoo/demo_data/hotpotqa/dev.jsonl"} <= set(names)  # the demo slice too


def test_regular_install_imports_every_subpackage_outside_the_checkout(wheel, tmp_path):
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target),
                    str(wheel)], check=True, capture_output=True)
    probe = (
        "import importlib, sys\n"
        f"mods = {SUBPACKAGES!r}\n"
        "for name in mods:\n"
        "    module = importlib.import_module(name)\n"
        "    print(name, module.__file__)\n"
        "for bare in ('programs', 'metrics', 'signatures', 'optimizers'):\n"
        "    try:\n"
        "        importlib.import_module(bare)\n"
        "    except ModuleNotFoundError:\n"
        "        continue\n"
        "    sys.exit(f'bare package {bare} is importable')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(target)}
    result = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stderr
    locations = dict(line.split(" ", 1) for line in result.stdout.splitlines())
    for name in SUBPACKAGES:
        assert locations[name].startswith(str(target)), (name, locations[name])
    assert locations["ragzoo.programs"].endswith(os.path.join("ragzoo", "programs", "__init__.py"))


def test_editable_install_maps_the_top_level_folders():
    import ragzoo.metrics
    import ragzoo.programs

    assert Path(ragzoo.programs.__file__).parent == REPO / "programs"
    assert Path(ragzoo.metrics.__file__).parent == REPO / "metrics"
