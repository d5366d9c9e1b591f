"""`ragzoo report` says what it compares: shared questions, partial / killed / mostly-failed runs, knobs that
tell same-method runs apart, missing metrics as errors, and `--compare` with a named paired test."""

import json
from pathlib import Path

import pytest

from ragzoo.cli import main


def write_run(path: Path, *, method="rag", knobs=None, ids=range(10), em=None, n=None, errors=(), metrics=("em",),
              summary=True, dataset="hotpotqa", split="dev"):
    path.mkdir(parents=True)
    ids = [str(i) for i in ids]
    config = {"method": method, "knobs": knobs or {"k": 5}, "metrics": list(metrics), "n": n or len(ids),
              "dataset": dataset, "split": split, "lm": {"model": "openai/stub", "dry_run": False}}
    (path / "config.json").write_text(json.dumps(config))
    lines = []
    for position, i in enumerate(ids):
        score = em[position] if em is not None else 1.0
        lines.append({"id": i, "question": f"q{i}", "gold": ["a"], "prediction": "a" if score else "b",
                      "metrics": {m: score for m in metrics}, "lm_calls": 1, "prompt_tokens": 10,
                      "completion_tokens": 2, "cost": 0.001, "latency": 0.5,
                      "error": {"kind": "lm", "message": "x"} if i in errors else None})
    (path / "predictions.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    if summary:
        (path / "summary.json").write_text(json.dumps({"n": len(ids), "n_expected": config["n"],
                                                       "complete": len(ids) >= config["n"]}))
    return str(path)


def test_runs_sharing_one_question_are_called_out(tmp_path, capsys):
    a = write_run(tmp_path / "a", ids=range(100))
    b = write_run(tmp_path / "b", method="blendfilter", ids=range(99, 199))
    assert main(["report", a, b]) == 0
    out = capsys.readouterr().out
    assert "1 shared by all (of 100/100)" in out and "not comparable" in out
    assert main(["report", a, b, "--shared"]) == 0
    out = capsys.readouterr().out
    assert "over the 1 questions all runs answered" in out
    assert out.splitlines()[1].split()[:2] == ["rag", "1"]


def test_partial_killed_and_failed_runs_are_marked(tmp_path, capsys):
    partial = write_run(tmp_path / "partial", ids=range(5), n=20)
    killed = write_run(tmp_path / "killed", ids=range(7), n=2128, summary=False)
    failed = write_run(tmp_path / "failed", ids=range(20), errors={str(i) for i in range(20)}, em=[0.0] * 20)
    assert main(["report", partial, killed, failed]) == 0
    out = capsys.readouterr().out
    assert "partial 5/20" in out and "partial 7/2128" in out and "no summary: killed or still running" in out
    assert "mostly failed 20/20" in out and "(mostly failed)" in out
    assert out.count("(partial)") == 2 + 1  # two rows and the note


def test_same_method_runs_differ_by_their_knobs(tmp_path, capsys):
    a = write_run(tmp_path / "a", knobs={"k": 3})
    b = write_run(tmp_path / "b", knobs={"k": 5})
    assert main(["report", a, b, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [row["method"] for row in rows] == ["rag k=3", "rag k=5"]
    assert rows[0]["dataset"] == "hotpotqa" and rows[0]["lm"] == "openai/stub" and rows[0]["optimizer"].startswith("none")
    assert rows[0]["n_done"] == 10 and rows[0]["n_asked"] == 10 and rows[0]["latency_mean"] == pytest.approx(0.5)


def test_a_metric_a_run_lacks_is_an_error(tmp_path, capsys):
    a = write_run(tmp_path / "a", metrics=("em", "f1"))
    b = write_run(tmp_path / "b", metrics=("acc",), dataset="strategyqa")
    assert main(["report", a, b, "--metric", "em"]) != 0
    assert "has no metric em" in capsys.readouterr().err
    assert main(["report", a, b]) == 0
    out = capsys.readouterr().out
    assert "left out because not every run has them: acc, em, f1" in out and "different datasets" in out


def test_compare_names_the_test_and_gives_textbook_values(tmp_path, capsys):
    a = write_run(tmp_path / "a", ids=range(8), em=[1, 1, 1, 1, 1, 0, 0, 0])
    b = write_run(tmp_path / "b", ids=range(8), em=[0] * 8, knobs={"k": 3})
    assert main(["report", a, b, "--compare", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert found["shared"] == 8 and found["comparison"]["p_value"] == pytest.approx(2 / 32)  # exact sign-flip
    assert found["comparison"]["difference"]["mean"] == pytest.approx(5 / 8)
    assert [d["id"] for d in found["disagreements"]] == ["0", "1", "2", "3", "4"]
    assert main(["report", a, b, "--compare"]) == 0
    out = capsys.readouterr().out
    assert "paired permutation test" in out and "A − B = +0.625 [95% CI" in out and "p = 0.0625" in out
    assert "questions where they disagree (5" in out


def test_compare_refuses_runs_without_shared_questions(tmp_path, capsys):
    a = write_run(tmp_path / "a", ids=range(5))
    b = write_run(tmp_path / "b", ids=range(5, 10))
    assert main(["report", a, b, "--compare"]) != 0
    assert "share no question" in capsys.readouterr().err


def test_plot_has_a_legend_and_cis(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.figure

    legends = []
    original = matplotlib.figure.Figure.savefig

    def spy(self, *args, **kwargs):
        for ax in self.axes:
            legend = ax.get_legend()
            legends.append(([t.get_text() for t in legend.get_texts()] if legend else [], ax.get_xlabel(),
                            ax.get_ylabel()))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", spy)
    a = write_run(tmp_path / "a", em=[1, 0] * 5, knobs={"k": 3})
    b = write_run(tmp_path / "b", em=[1, 1] * 5)
    png = tmp_path / "p.png"
    assert main(["report", a, b, "--plot", str(png)]) == 0
    assert png.read_bytes()[:4] == b"\x89PNG"
    (texts, xlabel, ylabel), = legends
    assert texts == ["rag k=3 (n=10)", "rag k=5 (n=10)"]
    assert xlabel == "LM calls per question" and "95% CI" in ylabel
