"""The post-fusion voter: unknown detection, plurality without unknowns, ties by retrieval rank."""

from __future__ import annotations

import pytest

from ragzoo.programs.voting import UNKNOWN, distinct_candidates, is_unknown, majority_vote, normalize_answer


@pytest.mark.parametrize("answer", ["unknown", "Unknown.", " UNKNOWN ", "the unknown", "", None])
def test_unknown_is_detected_after_normalization(answer):
    assert is_unknown(answer)


@pytest.mark.parametrize("answer", ["Paris", "The Knowns", "unknown soldier", "A", "N/A"])
def test_real_answers_are_not_unknown_in_exact_mode(answer):
    assert not is_unknown(answer)


@pytest.mark.parametrize("answer", ["The context does not provide the answer.", "I don't know",
                                    "cannot be determined", "N/A", "Information not provided"])
def test_lenient_mode_catches_refusal_phrasings(answer):
    assert not is_unknown(answer)
    assert is_unknown(answer, lenient=True)


def test_lenient_mode_keeps_real_answers():
    assert not is_unknown("Nashville", lenient=True)
    assert not is_unknown("Butch Vig", lenient=True)


def test_unknowns_do_not_vote():
    # Three unknowns would win a plain plurality; they are dropped instead.
    vote = majority_vote(["unknown", "Unknown", "unknown", "Paris", "London", "Paris"])
    assert vote.answer == "Paris"
    assert vote.counts == {"paris": 2, "london": 1}
    assert vote.unknown_votes == 3
    assert vote.winner_rank == 3
    assert not vote.tied


def test_tie_goes_to_best_retrieval_rank():
    vote = majority_vote(["unknown", "London", "Paris", "paris", "London."])
    assert vote.answer == "London"
    assert vote.tied
    assert vote.winner_rank == 1
    # The same pool in another rank order flips the winner.
    assert majority_vote(["Paris", "London", "London", "Paris"]).answer == "Paris"


def test_normalized_answers_count_together_and_first_surface_form_is_returned():
    vote = majority_vote(["The Beatles", "Rolling Stones", "beatles!", "the rolling stones", "Beatles"])
    assert vote.answer == "The Beatles"
    assert vote.counts == {"beatles": 3, "rolling stones": 2}
    assert vote.supporters(["The Beatles", "Rolling Stones", "beatles!", "the rolling stones", "Beatles"]) == [0, 2, 4]


def test_all_unknown_gives_unknown():
    vote = majority_vote(["unknown", "Unknown.", ""])
    assert vote.answer == UNKNOWN
    assert vote.is_unknown
    assert vote.winner_rank is None
    assert vote.counts == {}
    assert vote.supporters(["unknown"]) == []
    assert majority_vote([]).answer == UNKNOWN


def test_answer_emptied_by_normalizer_still_counts():
    # SQuAD normalization removes the article "a"; the answer "A" must not become an abstention.
    assert normalize_answer("A") == "a"
    vote = majority_vote(["A", "B", "a"])
    assert vote.answer == "A"
    assert vote.counts == {"a": 2, "b": 1}


def test_lenient_vote_drops_refusals():
    answers = ["The context does not provide it", "Paris"]
    assert majority_vote(answers).answer == "The context does not provide it"
    assert majority_vote(answers, lenient=True).answer == "Paris"


def test_distinct_candidates_dedup_in_rank_order_without_unknowns():
    assert distinct_candidates(["unknown", " Paris ", "London", "paris", "Unknown.", "Rome"]) == \
        ["Paris", "London", "Rome"]
    assert distinct_candidates(["unknown"]) == []
