"""`python -m ragzoo.retrieval.store compress DIR` converts a passage store in place and then deletes
passages.jsonl and passage_offsets.npy: it may do that only in an index ragzoo made (the ownership rule of
`ragzoo.ownership`). A folder of the user's that merely holds files of those names is refused in one line, exit 1,
every file as it was."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ragzoo import ownership
from ragzoo.retrieval.store import BLOCK_FILES, PLAIN_FILES, PassageStoreWriter, main


def _plain_store(folder: Path, rows: int = 30) -> None:
    writer = PassageStoreWriter(folder, compress=False)
    for row in range(rows):
        writer.add(str(row), f"title {row}", f"text of passage {row}")
    writer.close()


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in folder.iterdir()}


def _refused_in_one_line(capsys, folder: Path) -> str:
    assert main(["compress", str(folder), "--quiet"]) == 1
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert captured.out == "" and len(lines) == 1 and "Traceback" not in captured.err, captured.err
    assert lines[0].startswith("ragzoo: cannot compress the passage store:")
    return lines[0]


def test_a_users_folder_holding_store_named_files_is_refused_and_left_as_it_was(tmp_path, capsys):
    folder = tmp_path / "my-data"
    _plain_store(folder)
    (folder / "NOTES.md").write_text("mine")
    before = _snapshot(folder)
    line = _refused_in_one_line(capsys, folder)
    assert "not a ragzoo index" in line and ownership.MARKER in line
    assert _snapshot(folder) == before  # nothing deleted, nothing added


def test_a_folder_of_another_ragzoo_kind_is_refused(tmp_path, capsys):
    folder = tmp_path / "a-run"
    _plain_store(folder)
    ownership.mark(folder, "run", list(PLAIN_FILES))
    before = _snapshot(folder)
    line = _refused_in_one_line(capsys, folder)
    assert "ragzoo run directory" in line
    assert _snapshot(folder) == before


def test_a_users_file_at_a_block_files_name_inside_an_index_is_never_overwritten(tmp_path, capsys):
    folder = tmp_path / "index"
    _plain_store(folder)
    (folder / "meta.json").write_text(json.dumps({"format": "ragzoo-index"}))
    ownership.mark(folder, "index", ["meta.json", *PLAIN_FILES])
    (folder / BLOCK_FILES[0]).write_bytes(b"the user's own file, not ragzoo's")
    before = _snapshot(folder)
    line = _refused_in_one_line(capsys, folder)
    assert BLOCK_FILES[0] in line
    assert _snapshot(folder) == before


def test_the_module_refuses_through_its_command_line_too(tmp_path):
    folder = tmp_path / "my-data"
    _plain_store(folder)
    before = _snapshot(folder)
    done = subprocess.run([sys.executable, "-m", "ragzoo.retrieval.store", "compress", str(folder), "--quiet"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert _snapshot(folder) == before


def test_a_ragzoo_index_is_still_converted(tmp_path, capsys):
    folder = tmp_path / "index"
    _plain_store(folder)
    (folder / "meta.json").write_text(json.dumps({"format": "ragzoo-index"}))  # an earlier version's, no marker
    (folder / "NOTES.md").write_text("mine")
    assert main(["compress", str(folder), "--quiet"]) == 0
    assert json.loads(capsys.readouterr().out)["passages"] == 30
    assert (folder / "NOTES.md").read_text() == "mine" and not (folder / PLAIN_FILES[0]).exists()
