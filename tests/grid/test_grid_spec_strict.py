"""A grid file says what it means or is refused (grid review): every key known and of its type, in one line,
before the grid folder is written or any cell runs. Before: an unknown key was ignored (`[compil]` ran every cell
uncompiled), `cache = "false"` turned the cache on, a misspelt column dropped a row, a string where a number goes
was an internal error, and an unknown dataset, knob or metric failed its cells one by one after the others were
paid for."""

from __future__ import annotations

import copy
import json

import pytest

from ragzoo.cli import main
from ragzoo.errors import ConfigError
from ragzoo.grid import parse_grid

BASE = {"grid": {"name": "g", "n": 2, "lms": ["dry-run"]},
        "datasets": [{"name": "hotpotqa", "split": "dev_first500", "metrics": ["em"], "label": "HotPotQA"}],
        "methods": [{"id": "direct"}, {"id": "rag", "knobs": {"k": 2}, "paper": {"HotPotQA": {"em": 41.2}}}]}


def _toml(value) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{key} = {_toml(item)}" for key, item in value.items()) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(map(_toml, value)) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value)


def _file(data: dict) -> str:
    lines = []
    for table in ("grid", "compile"):
        if table in data:
            lines += [f"[{table}]", *(f"{key} = {_toml(item)}" for key, item in data[table].items())]
    for array in ("datasets", "methods"):
        for entry in data.get(array, []):
            lines += [f"[[{array}]]", *(f"{key} = {_toml(item)}" for key, item in entry.items())]
    return "\n".join(lines) + "\n"


def _with(path: str, value):
    data = copy.deepcopy(BASE)
    *parents, last = path.split(".")
    node = data
    for part in parents:
        node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
    node[last] = value
    return data


@pytest.mark.parametrize("path, value, says", [
    ("compil", {"optimizers": ["bootstrap"]}, "has no key 'compil'"),
    ("methods.1.knob", {"k": 3}, "[[methods]] has no key 'knob'"),
    ("grid.nn", 10, "[grid] has no key 'nn'"),
    ("grid.lms", [{"spec": "openai/x", "api_base": "http://127.0.0.1:1/v1", "cache": "false"}],
     "cache must be true or false"),
    ("methods.1.columns", ["HotpotQA"], "names column 'HotpotQA', which is none of the datasets' labels"),
    ("grid.seed", "x", "[grid] seed 'x': expected"),
    ("grid.threads", "many", "[grid] threads 'many': expected"),
    ("grid.n", 2.5, "[grid] n 2.5: expected"),
    ("grid.n", 0, "[grid] n 0: expected"),
    ("grid.scale", "pct", "scale must be a positive number"),
    ("methods.1.knobs", 5, "knobs must be a table"),
    ("methods.1.paper", {"HotPotQA": {"em": "41.2"}}, "paper.HotPotQA must be a table of numbers"),
    ("methods.1.dataset_knobs", "x", "dataset_knobs must be a table"),
    ("datasets.0.metrics", 5, "metrics must be a string or a list of strings"),
    ("datasets.0.split", 5, "split must be a non-empty string"),
    ("grid.lms", ["dry-run", "dry-run"], "names one LM twice"),
    ("grid.name", "../../escaped", "[grid] name '../../escaped' must be letters"),
    ("grid.name", "/tmp/abs", "[grid] name '/tmp/abs' must be letters"),
    ("grid.lms", 5, "lms is a spec string, a table with 'spec' or a list of them, got 5"),  # was a TypeError
    ("grid.lms", True, "lms is a spec string, a table with 'spec' or a list of them, got True"),
])
def test_a_grid_file_mistake_is_refused_in_one_line(path, value, says):
    with pytest.raises(ConfigError) as refused:
        parse_grid(_with(path, value), "g.toml")
    assert says in str(refused.value) and "\n" not in str(refused.value)


def test_the_grid_file_as_written_parses():
    grid = parse_grid(copy.deepcopy(BASE), "g.toml")
    assert [c.method.id for c in grid.cells()] == ["direct", "rag"] and grid.lms[0].cache is True
    # one column given as a string is that column (it was read as its letters, and the row vanished)
    one = parse_grid(_with("methods.1.columns", "HotPotQA"), "g.toml")
    assert [c.method.id for c in one.cells()] == ["direct", "rag"]


@pytest.mark.parametrize("path, value, says", [
    ("datasets.0.name", "hotpotqaa", "hotpotqaa"),
    ("datasets.0.metrics", ["emm"], "emm"),
    ("methods.1.knobs", {"kk": 2}, "kk"),
    ("grid.n", 501, "n = 501, but hotpotqa/dev_first500 has 500 questions"),
    ("grid.retriever", "bm26:x.jsonl", "unknown retriever spec 'bm26:x.jsonl'"),
])
def test_a_cell_that_cannot_run_is_refused_before_the_grid_folder_is_written(tmp_path, capsys, path, value, says):
    grid_file = tmp_path / "g.toml"
    grid_file.write_text(_file(_with(path, value)), encoding="utf-8")
    out = tmp_path / "out"
    assert main(["sweep", str(grid_file), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert says in err and len([line for line in err.splitlines() if line.strip()]) == 1, err
    assert not out.exists()


def test_a_column_without_metrics_is_scored_and_compared_by_the_datasets_default(tmp_path, capsys, stub_server,
                                                                                 grid_env):
    """Grid review: a [[datasets]] without metrics made a "(default)" column that every cell was missing, and no
    paired test, with exit 0."""
    data = copy.deepcopy(BASE)
    del data["datasets"][0]["metrics"]
    data["grid"]["lms"] = [{"spec": "openai/stub", "api_base": f"{stub_server.base_url}/v1", "cache": False}]
    assert parse_grid(data, "g.toml").datasets[0].metrics == ("em", "f1")  # what evaluate scores hotpotqa by
    grid_file = tmp_path / "g.toml"
    grid_file.write_text(_file(data), encoding="utf-8")
    out = tmp_path / "out"
    assert main(["sweep", str(grid_file), "--out", str(out), "--quiet"]) == 0, capsys.readouterr().err
    table = json.loads((out / "results.json").read_text())
    assert [column["metrics"] for column in table["columns"]] == [["em", "f1"]]
    assert all({"em", "f1"} <= set(row["cells"]["HotPotQA"]["metrics"]) for row in table["rows"])
    assert [(c["a"], c["b"], c["metric"]) for c in table["comparisons"]] == [("rag", "direct", "em")]


def test_a_grid_file_that_is_not_utf8_and_an_empty_optimizer_list_are_refused_in_one_line(tmp_path, capsys):
    """Grid review: a Latin-1 grid file was an internal UnicodeDecodeError; `--optimizer ,,` ran an empty grid and
    exited 0."""
    latin = tmp_path / "latin.toml"
    latin.write_bytes(_file(BASE).replace('label = "HotPotQA"', 'label = "Hotpot\xe9"').encode("latin-1"))
    assert main(["sweep", str(latin), "--out", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert "not UTF-8 text" in err and "internal error" not in err and len(err.strip().splitlines()) == 1, err
    grid_file = tmp_path / "g.toml"
    grid_file.write_text(_file(BASE), encoding="utf-8")
    assert main(["sweep", str(grid_file), "--out", str(tmp_path / "b"), "--optimizer", ",,"]) == 2
    err = capsys.readouterr().err
    assert "--optimizer ',,' names no optimizer" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_an_endpoint_url_with_credentials_is_refused_once_before_the_grid_folder_is_written(tmp_path, capsys):
    """Grid review: an --api-base carrying user:password was refused by each cell in turn (exit 1), after the grid
    folder was written."""
    grid_file = tmp_path / "g.toml"
    grid_file.write_text(_file(BASE), encoding="utf-8")
    out = tmp_path / "out"
    assert main(["sweep", str(grid_file), "--out", str(out), "--lm", "openai/x", "--api-base",
                 "http://al:pw@127.0.0.1:9/v1"]) == 2
    err = capsys.readouterr().err
    assert "carries credentials" in err and "pw" not in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()


def test_a_storage_that_cannot_be_opened_is_refused_before_the_grid_folder_is_written(tmp_path, capsys):
    grid_file = tmp_path / "g.toml"
    grid_file.write_text(_file(BASE), encoding="utf-8")
    out = tmp_path / "out"
    assert main(["sweep", str(grid_file), "--out", str(out), "--storage", "bogus://x"]) == 2
    assert "--storage bogus://x: not a database URL" in capsys.readouterr().err and not out.exists()


def test_report_finds_the_grid_file_from_another_folder(tmp_path, monkeypatch, capsys):
    """Review: grid.json kept the grid file's path as given (relative), and `ragzoo report OUT` run from another
    folder said the grid file was gone."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "g.toml").write_text(_file(BASE), encoding="utf-8")
    monkeypatch.chdir(work)
    assert main(["sweep", "g.toml", "--out", "out", "--quiet"]) == 0
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    assert main(["report", str(work / "out")]) == 0
    assert "rag k=2 | hotpotqa/dev_first500" in capsys.readouterr().out


def test_a_dry_run_says_how_to_price_an_unpriced_model(tmp_path, capsys):
    """Review: --price was ignored by --dry-run, and the refusal did not name --price-as, the flag that works."""
    grid_file = tmp_path / "g.toml"
    grid_file.write_text(_file(_with("grid.lms", ["openai/stub"])), encoding="utf-8")
    assert main(["sweep", str(grid_file), "--dry-run", "--price", "0.1,0.2"]) == 2
    assert "name one with --price-as MODEL" in capsys.readouterr().err
    assert main(["sweep", str(grid_file), "--dry-run", "--price-sample", "1"]) == 2
    assert "or price the dry run as one with --price-as MODEL" in capsys.readouterr().err


def test_a_journal_worker_with_nothing_left_says_its_table_is_partial(tmp_path):
    """Review: with `--storage journal:`, a worker that found no cell left while another worker still ran one
    returned at once (a journal keeps no heartbeats) and wrote its table as if final, saying nothing."""
    from ragzoo.grid.runner import OptunaClaims

    said: list[str] = []
    url = f"journal:{tmp_path / 'grid.journal'}"
    first = OptunaClaims(url, "g", ["a", "b"], choices=["a", "b"])
    second = OptunaClaims(url, "g", ["a", "b"], choices=["a", "b"], say=said.append)
    key_first, _token = first.next()
    key_second, token_second = second.next()
    assert {key_first, key_second} == {"a", "b"}
    second.done(token_second, True)
    assert second.next() == (None, None)
    assert len(said) == 1 and "1 cell(s) are still run by other workers" in said[0] and "partial" in said[0]
