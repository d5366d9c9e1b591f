"""The presets of papers that retrieve from DPR's 21M-passage Wikipedia (Post-Fusion, FILCO, RA-ISF) use
`wiki18-100w` when it is fetched, and otherwise the shipped 24,641-passage sample, saying which and why on
stderr and in the grid's grid.json; each cell's run records the retriever it searched. Run end to end against
the stub LM server (one method, one column, n = 1)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragzoo.cli import main

SAMPLE = "wiki18_passages/corpus.jsonl"
PRESETS = ["postfusion-table1", "postfusion-table2", "filco-table4", "raisf-table1"]


def tiny_wiki18(corpora: Path) -> Path:
    """A complete `wiki18-100w` as `corpus fetch` leaves it (file + marker), converted from two local
    psgs_w100-shaped parquet files: no hub involved."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ragzoo.retrieval import fetch

    shards = []
    for i in range(2):
        path = corpora.parent / f"shard{i}.parquet"
        pq.write_table(pa.table({"id": [str(2 * i + 1), str(2 * i + 2)],
                                 "text": [f"passage {2 * i + 1} about the world", f"passage {2 * i + 2} of history"],
                                 "title": [f"T{2 * i + 1}", f"T{2 * i + 2}"]}), path)
        shards.append((f"shard{i}", path, None, None))
    target = fetch.corpus_path("wiki18-100w", corpora)
    fetch.convert_parquet(shards, target, progress=False)
    assert fetch.is_complete(target)
    return target


def reproduce(name: str, out: Path, stub_server, capsys) -> tuple[int, str]:
    code = main(["reproduce", name, "--lm", "openai/stub", "--api-base", f"{stub_server.base_url}/v1", "--n", "1",
                 "--optimizer", "none", "--datasets", "NQ", "--methods", "concat", "--out", str(out), "--quiet",
                 "--no-cache"])
    return code, capsys.readouterr().err


def cell_retrievers(out: Path) -> set[str]:
    """The --retriever each cell's run was given, from the run records the cells wrote."""
    found = set()
    for config in out.glob("cells/*/run/config.json"):
        found.add(json.loads(config.read_text(encoding="utf-8"))["retriever"])
    return found


@pytest.fixture
def corpora(tmp_path, monkeypatch):
    root = tmp_path / "corpora"
    monkeypatch.setenv("RAGZOO_CORPORA", str(root))
    return root


def test_without_the_corpus_the_preset_keeps_the_sample_and_says_so(corpora, tmp_path, stub_server, grid_env,
                                                                    capsys):
    out = tmp_path / "grid"
    code, err = reproduce("postfusion-table2", out, stub_server, capsys)
    assert code == 0, err[-3000:]
    (line,) = [line for line in err.splitlines() if "wiki18-100w" in line]
    assert line.startswith("postfusion-table2: the paper's corpus wiki18-100w is not fetched")
    assert SAMPLE in line and "ragzoo corpus fetch wiki18-100w" in line
    used = json.loads((out / "grid.json").read_text())["paper"]["corpus_used"]
    assert used == {"corpus": SAMPLE, "paper_corpus": "wiki18-100w", "fetched": False, "why": line.split(": ", 1)[1]}
    assert cell_retrievers(out) == {f"bm25:{SAMPLE}"}


def test_with_the_corpus_fetched_the_preset_retrieves_from_it(corpora, tmp_path, stub_server, grid_env, capsys):
    target = tiny_wiki18(corpora)
    out = tmp_path / "grid"
    code, err = reproduce("postfusion-table2", out, stub_server, capsys)
    assert code == 0, err[-3000:]
    (line,) = [line for line in err.splitlines() if "wiki18-100w" in line]
    assert line.startswith("postfusion-table2: the paper's corpus wiki18-100w") and str(target) in line
    used = json.loads((out / "grid.json").read_text())["paper"]["corpus_used"]
    assert used["corpus"] == "wiki18-100w" and used["fetched"] is True and str(target) in used["why"]
    assert cell_retrievers(out) == {"bm25:wiki18-100w?format=packed&backend=numba"}  # 21M: compressed postings
    results = (out / "results.md").read_text()
    assert "corpus: the paper's corpus wiki18-100w" in results
    # review: the count was the registry's (21M) and the grid's own "bm25 over a 24,641-passage sample" stood
    assert "(4 passages; UNVERIFIED" in line and "21,015,324" not in line
    (sample_line,) = [text for text in results.splitlines() if "24,641-passage sample" in text]
    assert "in this run the fetched wiki18-100w replaces that sample" in sample_line
    assert main(["corpus", "fetch", "--list"]) == 0
    listed = capsys.readouterr().out.split("wiki18-100w  [")[1].split("\n\n")[0]
    assert "4 passages; UNVERIFIED (fetched with --allow-unverified)" in listed
    # grid review: `ragzoo report OUT` rebuilt the grid without the corpus swap and refused the folder as edited
    assert main(["report", str(out)]) == 0, capsys.readouterr().err
    assert "corpus: the paper's corpus wiki18-100w" in capsys.readouterr().out


@pytest.mark.parametrize("name", PRESETS)
def test_each_wiki18_preset_names_its_corpus_and_swaps_only_the_sample(name, corpora):
    from ragzoo.commands.reproduce import use_paper_corpus
    from ragzoo.grid import bundled_grids, load_grid

    grid = load_grid(bundled_grids()[name])
    assert grid.paper["corpus"] == "wiki18-100w"
    before = {d.label: d.retriever or grid.retriever for d in grid.datasets}
    assert f"bm25:{SAMPLE}" in before.values()
    assert {d.label: d.retriever or grid.retriever for d in use_paper_corpus(grid).datasets} == before

    tiny_wiki18(corpora)
    swapped = use_paper_corpus(load_grid(bundled_grids()[name]))
    after = {d.label: d.retriever or swapped.retriever for d in swapped.datasets}
    full = "bm25:wiki18-100w?format=packed&backend=numba"
    assert after == {label: full if spec == f"bm25:{SAMPLE}" else spec
                     for label, spec in before.items()}  # the wiki17 and 2Wiki columns keep their corpora


def test_a_fetched_corpus_that_cannot_be_searched_here_keeps_the_sample_and_says_why(corpora, monkeypatch,
                                                                                       capsys):
    import importlib.util

    from ragzoo.commands.reproduce import use_paper_corpus
    from ragzoo.grid import bundled_grids, load_grid

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "numba" else real(name, *a))
    tiny_wiki18(corpora)
    grid = use_paper_corpus(load_grid(bundled_grids()["filco-table4"]))
    assert grid.retriever == f"bm25:{SAMPLE}"
    assert grid.paper["corpus_used"]["fetched"] is False and grid.paper["corpus_used"]["corpus"] == SAMPLE
    (line,) = capsys.readouterr().err.splitlines()
    assert "is fetched, but" in line and "numba" in line and "ragzoo[fast]" in line


def test_the_swap_keeps_a_spec_s_own_options():
    from ragzoo.retrieval import fetch

    assert fetch.over_sample(f"bm25:{SAMPLE}?k1=1.2&backend=numpy", "wiki18-100w") == \
        "bm25:wiki18-100w?k1=1.2&backend=numpy&format=packed"
    assert fetch.over_sample("bm25:hotpotqa/corpus_wiki17_abstracts.jsonl", "wiki18-100w") is None
    assert fetch.over_sample(f"dense:{SAMPLE}", "wiki18-100w") is None  # 21M passages to embed: not swapped


def test_grids_of_other_corpora_are_left_alone(corpora, capsys):
    from ragzoo.commands.reproduce import use_paper_corpus
    from ragzoo.grid import bundled_grids, load_grid

    tiny_wiki18(corpora)
    for name in ("blendfilter-table2", "activerag-table2"):
        grid = load_grid(bundled_grids()[name])
        before = [(d.label, d.retriever) for d in grid.datasets], grid.retriever, dict(grid.paper)
        grid = use_paper_corpus(grid)
        assert ([(d.label, d.retriever) for d in grid.datasets], grid.retriever, grid.paper) == before
    assert capsys.readouterr().err == ""
