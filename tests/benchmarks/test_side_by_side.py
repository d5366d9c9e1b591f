"""The bm25 benchmarks' side-by-side table: interleaved rounds, per-round ratios, medians, and a run of the real
thing (ragzoo vs bm25s's retrieve on one index) that prints the ratio columns."""

from __future__ import annotations

import json

import pytest

from benchmarks.retrieval import cpu_rows, interleaved, print_table, ratio_row, side_by_side


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_rounds_alternate_and_ratios_are_per_round_medians():
    clock, order = FakeClock(), []
    # seconds per run, round by round: the machine slows down in round 2 for both, as a shared one does
    seconds = {"ours": [1.0, 2.0, 4.0, 1.0, 1.0], "bm25s": [2.0, 4.0, 8.0, 2.0, 1.0]}

    def runner(name):
        def run():
            order.append(name)
            clock.now += seconds[name][sum(1 for n in order if n == name) - 1]
        return run

    rates = interleaved({"ours": runner("ours"), "bm25s": runner("bm25s")}, {"ours": 100, "bm25s": 100}, 5,
                        clock=clock)
    assert order == ["ours", "bm25s", "bm25s", "ours", "ours", "bm25s", "bm25s", "ours", "ours", "bm25s"]
    assert rates["ours"] == [100.0, 50.0, 25.0, 100.0, 100.0]
    assert rates["bm25s"] == [50.0, 25.0, 12.5, 50.0, 100.0]
    row = ratio_row("numba batch", rates["ours"], rates["bm25s"])
    assert row["ours/bm25s"] == 2.0  # per-round ratios 2, 2, 2, 2, 1: their median
    assert row["ratio range"] == "1.00-2.00" and row["rounds"] == 5
    assert row["ours q/s"] == 100.0 and row["bm25s q/s"] == 50.0


def test_table_prints_the_ratio_columns(capsys):
    print_table("side by side", [ratio_row("numba single", [300.0, 330.0, 310.0], [100.0, 100.0, 120.0])])
    out = capsys.readouterr().out.splitlines()
    assert out[1] == "## side by side"
    assert out[2].split() == ["mode", "bm25s", "q/s", "ours", "q/s", "ours/bm25s", "ratio", "range", "rounds"]
    assert out[3].split() == ["numba", "single", "100", "310", "3.000", "2.58-3.30", "3"]


@pytest.fixture
def tiny_index(tmp_path):
    from ragzoo.retrieval.bm25 import ensure_bm25_index

    words = ["river", "city", "film", "album", "band", "war", "king", "queen", "music", "paris"]
    corpus = tmp_path / "corpus.jsonl"
    with open(corpus, "w") as sink:
        for i in range(300):
            text = " ".join(words[(i * j) % len(words)] for j in range(1, 3 + i % 7))
            sink.write(json.dumps({"id": f"d{i}", "title": f"T{i}", "text": text}) + "\n")
    folder, _meta, _built = ensure_bm25_index(corpus, out_dir=tmp_path / "index", show_progress=False)
    return folder


def test_side_by_side_runs_both_on_one_index(tiny_index):
    questions = ["which river city", "film album band", "king and queen of paris", "war music"] * 3
    rows, flat = side_by_side(tiny_index, questions, rounds=2, backends=("numpy",), label="csc ",
                              cpu_backends=("numpy",))
    assert [row["mode"] for row in rows] == ["csc numpy single", "csc numpy batch", "csc numpy single, hits read",
                                             "csc numpy batch, hits read"]
    for row in rows:
        assert row["ours q/s"] > 0 and row["bm25s q/s"] > 0 and row["rounds"] == 2
        assert row["questions"] == len(questions)
        assert row["ours CPU us/q"] > 0 and row["bm25s CPU us/q"] > 0 and row["ours/bm25s CPU"] > 0
        assert row["returns (ours / bm25s)"].endswith(" / rows")  # what each side hands back, said
    assert flat["ours numpy batch, hits read cpu us/q"] == rows[3]["ours CPU us/q"]
    assert flat["ours/bm25s numpy batch"] == rows[1]["ours/bm25s"]
    assert flat[f"numpy top-10 scores == bm25s (of {len(questions)})"] == len(questions)
    assert flat["side by side load"].startswith("load average ")
    split = cpu_rows({f"csc {key}": value for key, value in flat.items()})
    assert [row["setup"] for row in split] == ["csc numpy"]
    parts = split[0]
    assert set(parts) == {"setup", "ours tokenize us", "ours score us", "ours hits us", "ours call us",
                          "bm25s tokenize us", "bm25s retrieve us", "bm25s call us"}
    assert all(value >= 0 for key, value in parts.items() if key != "setup") and parts["ours call us"] > 0


@pytest.mark.parametrize("quick", [True, False])
def test_every_benchmark_parses_the_arguments_the_runner_gives_it(tmp_path, monkeypatch, quick):
    """Review: `python -m benchmarks --quick` gave throughput a flag it has no more (--per-thread): argparse
    exited the whole runner, and the later benchmarks never ran."""
    import argparse
    import importlib

    from benchmarks.__main__ import OPT_IN, ORDER, arguments

    class Parsed(Exception):
        pass

    real = argparse.ArgumentParser.parse_args

    def parse_then_stop(self, args=None, namespace=None):
        real(self, args, namespace)
        raise Parsed

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)
    for name in ORDER + OPT_IN:
        with pytest.raises(Parsed):
            importlib.import_module(f"benchmarks.{name}").main(arguments(name, quick, tmp_path))


def test_figures_count_what_their_labels_say():
    """Review: the serving benchmark's req/s (and its ratio to ideal) counted 503s and dropped connections as
    served; the overhead profile's split knew ragzoo's code only under /work/main (a clone elsewhere: ~1%)."""
    from pathlib import Path

    from benchmarks.overhead import _package
    from benchmarks.serving import _row

    row = _row("program", 32, [0.1] * 320, [200] * 160 + [503] * 100 + [0] * 60, elapsed=2.0)
    assert row["req/s"] == 80 and row["sent/s"] == 160 and row["503"] == 100 and row["errors"] == 60
    checkout = Path(__file__).resolve().parents[2]
    assert _package(str(checkout / "ragzoo" / "engines.py")) == "ragzoo"
    assert _package(str(checkout / "programs" / "filco.py")) == "ragzoo"
    assert _package(str(checkout / ".venv" / "lib" / "site-packages" / "dspy" / "predict.py")) == "dspy"
