"""The streaming corpus reader (`ragzoo.retrieval.corpus`): both line formats, pids, errors, line counting."""

from __future__ import annotations

import itertools
import json

import pytest

from ragzoo.errors import DataError
from ragzoo.retrieval.base import Passage
from ragzoo.retrieval.corpus import count_lines, iter_corpus


def write_lines(path, rows):
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows),
                    encoding="utf-8")
    return path


def test_sample_corpus_format(wiki17_corpus):
    first = next(iter_corpus(wiki17_corpus))
    assert isinstance(first, Passage)
    assert first.pid == "wiki17-1269c490d9ee72c7" and first.title == "Socialist Revolutionary Party"
    assert first.text.startswith("The Socialist Revolutionary Party, or Party of Socialists-Revolutionaries")
    assert first.long_text.startswith("Socialist Revolutionary Party | The Socialist")
    assert first.meta == {}
    with_meta = next(iter_corpus(wiki17_corpus, with_meta=True))
    assert "hotpotqa:rpt_train" in with_meta.meta["sources"]


def test_full_release_format_joins_sentences_and_numbers_lines(tmp_path, data_dir):
    # rebuild release-style lines from HotPotQA paragraphs, whose sentences carry their own leading spaces
    row = json.loads((data_dir / "hotpotqa" / "dev_distractor.jsonl").open(encoding="utf-8").readline())
    contexts = row["contexts"][:3]
    path = write_lines(tmp_path / "wiki.abstracts.2017.jsonl",
                       [{"title": c["title"], "text": c["sentences"]} for c in contexts])
    passages = list(iter_corpus(path))
    assert [p.pid for p in passages] == ["0", "1", "2"]  # 0-based line index, as ColBERTv2's collection
    assert [p.title for p in passages] == [c["title"] for c in contexts]
    assert [p.text for p in passages] == [c["text"] for c in contexts]
    assert "revolutionary socialism of democratic" in passages[0].text and ".  " not in passages[0].text


def test_blank_lines_keep_line_numbers(tmp_path):
    path = write_lines(tmp_path / "c.jsonl", [{"title": "A", "text": ["x"]}, "", {"title": "B", "text": "y"}])
    assert [(p.pid, p.title) for p in iter_corpus(path)] == [("0", "A"), ("2", "B")]
    assert count_lines(path) == 2


@pytest.mark.parametrize("rows, message", [
    ([{"id": "1", "title": "A", "text": "x"}, '{"id": "2", "title": "B", '], r"c\.jsonl:2: malformed JSON"),
    ([{"id": "1", "title": 3, "text": "x"}], r"c\.jsonl:1: field 'title' must be a string"),
    ([{"text": ["no", "title"]}], r"c\.jsonl:1: missing string field 'title'"),
    ([{"id": "1", "title": "A"}], r"c\.jsonl:1: missing field 'text'"),
    ([{"id": "1", "title": "A", "text": ["ok", 3]}], r"c\.jsonl:1: field 'text' must be a string or a list"),
    ([{"id": "1", "title": "A", "text": "x"}, {"id": "1", "title": "B", "text": "y"}], r"c\.jsonl:2: duplicate id '1'"),
    (['["not", "an", "object"]'], r"c\.jsonl:1: expected a JSON object"),
    (["", ""], r"c\.jsonl: no passages"),
])
def test_corpus_errors(tmp_path, rows, message):
    path = write_lines(tmp_path / "c.jsonl", rows)
    with pytest.raises(DataError, match=message):
        list(iter_corpus(path))


def test_colbert_style_lines_split_the_title_and_keep_their_ids(tmp_path):
    # ColBERTv2's collections: {"id"|"pid", "text": "Title | abstract"}; the collection's own ids stay the pids
    path = write_lines(tmp_path / "wiki17.jsonl", [
        {"id": 4021, "text": "Ed Wood | Edward Davis Wood Jr. was an American filmmaker. A | B"},
        {"pid": "77", "text": "Scott Derrickson | Scott Derrickson is a director."},
        {"id": "x9", "text": "no title separator here"},
    ])
    passages = list(iter_corpus(path))
    assert [(p.pid, p.title) for p in passages] == [("4021", "Ed Wood"), ("77", "Scott Derrickson"), ("x9", "")]
    assert passages[0].text == "Edward Davis Wood Jr. was an American filmmaker. A | B"  # split at the first " | "
    assert passages[0].long_text == "Ed Wood | Edward Davis Wood Jr. was an American filmmaker. A | B"


def test_own_ids_win_over_line_numbers(tmp_path):
    # `id`, else `pid` (the original collection's id), else `_id` (BEIR), else the 0-based line index
    path = write_lines(tmp_path / "c.jsonl", [{"pid": 12, "title": "A", "text": "x"},
                                              {"_id": "doc3", "title": "B", "text": "y"},
                                              {"title": "C", "text": ["z"]},
                                              {"id": "k", "pid": 5, "title": "D", "text": "w"}])
    passages = list(iter_corpus(path, with_meta=True))
    assert [p.pid for p in passages] == ["12", "doc3", "2", "k"]
    assert passages[3].meta == {"pid": 5}  # the other id is kept as metadata
    dup = write_lines(tmp_path / "dup.jsonl", [{"pid": 1, "title": "A", "text": "x"}, {"pid": 1, "title": "B",
                                                                                      "text": "y"}])
    with pytest.raises(DataError, match=r"dup\.jsonl:2: duplicate id '1'"):
        list(iter_corpus(dup))


def test_tsv_collections(tmp_path):
    # DPR's psgs_w100.tsv (header, quoted text, title column) and ColBERT's collection.tsv (pid, "Title | text")
    dpr = tmp_path / "psgs_w100.tsv"
    dpr.write_text('id\ttext\ttitle\n1\t"Aaron ( or ; ""Ahärôn"") is a prophet."\tAaron\n2\tplain text\tB\n',
                   encoding="utf-8")
    assert [(p.pid, p.title, p.text) for p in iter_corpus(dpr)] == [
        ("1", "Aaron", 'Aaron ( or ; "Ahärôn") is a prophet.'), ("2", "B", "plain text")]
    colbert = write_lines(tmp_path / "collection.tsv", ["0\tEd Wood | Edward Wood was a filmmaker.",
                                                        "1\tOnly text"])
    assert [(p.pid, p.title, p.text) for p in iter_corpus(colbert)] == [
        ("0", "Ed Wood", "Edward Wood was a filmmaker."), ("1", "", "Only text")]
    bad = write_lines(tmp_path / "bad.tsv", ["0\tA | x", "just one field"])
    with pytest.raises(DataError, match=r"bad\.tsv:2: expected 'pid<TAB>text' or 'pid<TAB>text<TAB>title'"):
        list(iter_corpus(bad))


def test_bad_line_error_starts_on_a_fresh_line_after_the_progress_bar(tmp_path, capsys):
    from ragzoo.cli import main

    path = write_lines(tmp_path / "c.jsonl", [{"id": "1", "title": "A", "text": "x"}, '{"id": "2", "title"'])
    assert main(["index", "build", "--corpus", str(path), "--out", str(tmp_path / "idx")]) != 0
    err = capsys.readouterr().err
    assert "bm25 index" in err  # the bar was shown ...
    line = next(line for line in err.splitlines() if "error:" in line)
    assert line.startswith("ragzoo index: error: ") and "c.jsonl:2: malformed JSON" in line  # ... and ended first


def test_missing_empty_and_non_utf8_corpus(tmp_path):
    with pytest.raises(DataError, match="file not found"):
        next(iter_corpus(tmp_path / "absent.jsonl"))
    (tmp_path / "empty.jsonl").write_bytes(b"")
    with pytest.raises(DataError, match="file is empty"):
        next(iter_corpus(tmp_path / "empty.jsonl"))
    (tmp_path / "bad.jsonl").write_bytes(b'{"title": "A", "text": "x"}\n{"title": "\xff", "text": "y"}\n')
    with pytest.raises(DataError, match=r"bad\.jsonl:2: not valid UTF-8"):
        list(iter_corpus(tmp_path / "bad.jsonl"))


@pytest.mark.needs_full_data
def test_streaming_reads_lazily_and_counts_cheaply(wiki17_corpus):
    assert count_lines(wiki17_corpus) == 17703
    head = list(itertools.islice(iter_corpus(wiki17_corpus), 3))
    assert len(head) == 3 and len({p.pid for p in head}) == 3


def test_data_never_imports_retrieval():
    """Corpus reading lives in retrieval; `ragzoo.data` must not import `ragzoo.retrieval` (no circle)."""
    import subprocess
    import sys

    code = ("import sys, ragzoo.data, ragzoo.data.records, ragzoo.data.formats, ragzoo.data.registry; "
            "print(sorted(m for m in sys.modules if m.startswith('ragzoo.retrieval')))")
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert shown.strip() == "[]"
    import ragzoo.data

    assert not hasattr(ragzoo.data, "iter_corpus")


def test_an_unpaired_surrogate_is_refused_with_its_line(tmp_path):
    """JSON may escape a lone surrogate ("\\ud800"); it is not Unicode, and failed later as an internal
    UnicodeEncodeError with no line (review). A pair (an emoji) is fine."""
    from ragzoo.errors import DataError
    from ragzoo.retrieval.corpus import iter_corpus

    path = tmp_path / "c.jsonl"
    path.write_text('{"id": "a", "title": "", "text": "fine \\ud83d\\ude00 pair"}\n'
                    '{"id": "b", "title": "", "text": "hello \\ud800 world"}\n')
    with pytest.raises(DataError, match=r"c.jsonl:2: holds an unpaired surrogate"):
        list(iter_corpus(path))
    path.write_text('{"id": "a", "title": "", "text": "fine \\ud83d\\ude00 pair"}\n')
    assert [p.text for p in iter_corpus(path)] == ["fine \U0001F600 pair"]
