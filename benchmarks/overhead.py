"""Pipeline overhead: each main method through ragzoo's program layer versus the same control flow written
by hand directly on DSPy predictors (target: ours / hand-written <= 1.05).

Both sides use the SAME LM (the dry-run LM: zero latency, type-valid placeholder answers, so the control
flow of every method is deterministic), the SAME retriever object and the same questions, in one process.
"Ours" is `ragzoo.programs.get(method)` called as `evaluate` calls it (inside `trace_example()`); "hand" is
a plain function per method below that calls `dspy.Predict` / `dspy.ChainOfThought` with the same
signatures, the same prompt formatting and the same knobs (paper defaults), with no ragzoo program class,
registry, tracing or retriever wrapper. The two sides alternate question by question (ours, hand, hand, ours,
...) for every repetition; each side's time is, per question, the median over repetitions, summed over
questions ("ratio (min)": the fastest repetition per question instead). Before timing, both sides are checked to make the same LM
calls and give the same answers on every question. Where a method misses the target it is profiled
(cProfile) and the time is split by package: ragzoo / dspy / litellm / tiktoken / other.

    python -m benchmarks.overhead [--n 20] [--reps 5] [--retriever static|bm25] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import os
import pstats
import statistics
import time
from pathlib import Path
from typing import Callable

METHODS = ("blendfilter", "concat_pf", "postfusion", "filco", "activerag", "raisf", "rag", "iter_retgen")
TARGET = 1.05


# -- hand-written control flows ------------------------------------------------------------------------
# Each builder returns `answer(question) -> str`, closing over its predictors (built once, like a program).

def _knowledge(passages) -> str:
    return "\n".join(f"knowledge {i} : {p.long_text}" for i, p in enumerate(passages)) if passages else "(none)"


def _numbered(passages) -> str:
    return "\n".join(f"[{i}] «{p.long_text}»" for i, p in enumerate(passages, start=1)) if passages else "(none)"


def _norm(text: str) -> str:
    from dspy.evaluate import normalize_text

    return normalize_text((text or "").strip()) or (text or "").strip().lower()


def hand_rag(retrieve, k: int = 5) -> Callable[[str], str]:
    import dspy

    from ragzoo.signatures.common import AnswerWithContext

    generate = dspy.Predict(AnswerWithContext)

    def answer(q: str) -> str:
        return generate(context=[p.long_text for p in retrieve(q, k)], question=q).answer

    return answer


def hand_iter_retgen(retrieve, k: int = 5, T: int = 3) -> Callable[[str], str]:
    import dspy

    from ragzoo.signatures.common import AnswerWithContext

    generate = dspy.ChainOfThought(AnswerWithContext)

    def answer(q: str) -> str:
        result = None
        for _ in range(T):
            query = q if result is None else f"{result.reasoning.strip()} {str(result.answer).strip()} {q}"
            result = generate(context=[p.long_text for p in retrieve(query, k)], question=q)
        return result.answer

    return answer


def hand_blendfilter(retrieve, k: int = 5) -> Callable[[str], str]:
    import dspy

    from ragzoo.signatures.blendfilter import (ExtractShortAnswer, FilterTopic, KnowledgeCoT, SelectRelevantIds,
                                               TopicRelevanceAnalysis, WritePassage)

    external_cot, write_passage = dspy.Predict(KnowledgeCoT), dspy.Predict(WritePassage)
    topic, analysis, select = dspy.Predict(FilterTopic), dspy.Predict(TopicRelevanceAnalysis), \
        dspy.Predict(SelectRelevantIds)
    answer_cot, extract = dspy.Predict(KnowledgeCoT), dspy.Predict(ExtractShortAnswer)

    def answer(q: str) -> str:
        docs_q = retrieve(q, k)
        a_ex = external_cot(knowledge=_knowledge(docs_q), question=q).reasoning
        a_in = write_passage(question=q).passage
        sets = [docs_q, retrieve(f"{a_ex.strip()} {q}", k), retrieve(f"{a_in.strip()} {q}", k)]
        kept, seen = [], set()
        for docs in sets:
            text = _knowledge(docs)
            t = topic(question=q).topic
            verdict = analysis(topic=t, question=q, knowledge=text).relevance_analysis
            ids = select(context=verdict, question=q, knowledge=text).relevant_ids
            for i in sorted({i for i in ids if 0 <= i < len(docs)}):
                if docs[i].pid not in seen:
                    seen.add(docs[i].pid)
                    kept.append(docs[i])
        reasoning = answer_cot(knowledge=_knowledge(kept), question=q).reasoning
        return extract(context=reasoning, question=q).answer

    return answer


def _vote(answers: list[str]) -> str:
    counts: dict[str, int] = {}
    first: dict[str, int] = {}
    for rank, a in enumerate(answers):
        key = _norm(a)
        if key in ("", "unknown"):
            continue
        counts[key] = counts.get(key, 0) + 1
        first.setdefault(key, rank)
    if not counts:
        return "unknown"
    best = max(counts.values())
    return answers[first[min((key for key, c in counts.items() if c == best), key=first.__getitem__)]].strip()


def hand_postfusion(retrieve, k: int = 5) -> Callable[[str], str]:
    import dspy

    from ragzoo.signatures.postfusion import PassageQA

    per_passage = dspy.Predict(PassageQA)

    def answer(q: str) -> str:
        return _vote([per_passage(context=_numbered([p]), question=q).answer for p in retrieve(q, k)])

    return answer


def hand_concat_pf(retrieve, k: int = 5) -> Callable[[str], str]:
    import dspy

    from ragzoo.signatures.postfusion import PassageQA

    concat, per_passage = dspy.Predict(PassageQA), dspy.Predict(PassageQA)

    def answer(q: str) -> str:
        passages = retrieve(q, k)
        first = concat(context=_numbered(passages), question=q).answer
        if _norm(first) not in ("", "unknown"):
            return first
        return _vote([per_passage(context=_numbered([p]), question=q).answer for p in passages])

    return answer


def hand_filco(retrieve, k: int = 1) -> Callable[[str], str]:
    import dspy

    from ragzoo.programs.filco_oracle import split_sentences
    from ragzoo.signatures.filco import AnswerFromFilteredContext, FilterSentences

    select, generate = dspy.Predict(FilterSentences), dspy.Predict(AnswerFromFilteredContext)

    def answer(q: str) -> str:
        passages = retrieve(q, k)
        context = []
        for p in passages:
            sentences = split_sentences(p.text)
            if not sentences:
                continue
            chosen = select(question=q, title=p.title,
                            sentences="\n".join(f"[{i}] {s}" for i, s in enumerate(sentences))).selected
            indices = sorted({i for i in chosen if 0 <= i < len(sentences)})
            if indices:
                context.append(f"{p.title} | " + " ".join(sentences[i] for i in indices))
        return generate(context=context or [p.long_text for p in passages], question=q).answer

    return answer


def hand_activerag(retrieve, k: int = 5) -> Callable[[str], str]:
    import dspy

    from ragzoo.signatures.activerag import AssociateKnowledge, AssociateNexus, InitialChainOfThought

    initial, construct, nexus = (dspy.Predict(InitialChainOfThought), dspy.Predict(AssociateKnowledge),
                                 dspy.Predict(AssociateNexus))

    def answer(q: str) -> str:
        context = [p.long_text for p in retrieve(q, k)]
        first = initial(question=q)
        reply = f"Reasoning process: {first.reasoning}\nAnswer: {first.answer}"
        knowledge = construct(question=q, passages=context).knowledge
        return nexus(question=q, passages=context, initial_reasoning=reply, knowledge=knowledge).answer

    return answer


def hand_raisf(retrieve, k: int = 5, max_depth: int = 3, max_sub: int = 5) -> Callable[[str], str]:
    import dspy

    from ragzoo.signatures.raisf import (Decompose, DirectAnswer, PassageRelevance, RelevantPassagesAnswer,
                                         SelfKnowledge, SynthesizeAnswer)

    know, direct, relevant = dspy.Predict(SelfKnowledge), dspy.Predict(DirectAnswer), dspy.Predict(PassageRelevance)
    from_passages, decompose, synthesize = (dspy.Predict(RelevantPassagesAnswer), dspy.Predict(Decompose),
                                            dspy.Predict(SynthesizeAnswer))

    def solve(q: str, depth: int) -> str:
        if depth > max_depth:
            return "unknown"
        if know(question=q).can_answer:
            return direct(question=q).answer
        kept = [p for p in retrieve(q, k) if relevant(question=q, passage=p.long_text).relevant]
        if kept:
            return from_passages(question=q, passages=[p.long_text for p in kept]).answer
        subs = [s.strip() for s in decompose(question=q).sub_questions if s.strip()][:max_sub]
        if not subs:
            return direct(question=q).answer
        pairs = [f"{s} -> {solve(s, depth + 1)}" for s in subs]
        return synthesize(question=q, sub_answers=pairs).answer

    return lambda q: solve(q, 0)


HAND_WRITTEN = {"blendfilter": hand_blendfilter, "concat_pf": hand_concat_pf, "postfusion": hand_postfusion,
                "filco": hand_filco, "activerag": hand_activerag, "raisf": hand_raisf, "rag": hand_rag,
                "iter_retgen": hand_iter_retgen}


# -- measurement ---------------------------------------------------------------------------------------
def ours_runner(method_id: str, retriever) -> Callable[[str], str]:
    from ragzoo import programs
    from ragzoo.tracing import trace_example

    program = programs.get(method_id, retriever=retriever)

    def answer(q: str) -> str:
        with trace_example():
            return program(question=q).answer

    return answer


def interleaved_times(ours, hand, questions: list[str], reps: int) -> tuple[list[list[float]], list[list[float]]]:
    """Seconds per (question, repetition) for each side. The two sides alternate question by question (and
    which goes first alternates too), so load from other processes hits both alike."""
    ours_t: list[list[float]] = [[] for _ in questions]
    hand_t: list[list[float]] = [[] for _ in questions]
    gc.collect()
    for rep in range(reps):
        for index, q in enumerate(questions):
            pair = ((ours, ours_t), (hand, hand_t)) if (rep + index) % 2 == 0 else ((hand, hand_t), (ours, ours_t))
            for run, sink in pair:
                started = time.perf_counter()
                run(q)
                sink[index].append(time.perf_counter() - started)
    return ours_t, hand_t


def check_same(ours, hand, questions: list[str], lm) -> tuple[float, float]:
    """Same answers and LM calls per question on both sides; returns (calls/q ours, calls/q hand)."""
    calls = []
    for run in (ours, hand):
        before = len(lm.history)
        answers = [run(q) for q in questions]
        calls.append((len(lm.history) - before) / len(questions))
        if run is ours:
            ours_answers = answers
    if answers != ours_answers:
        raise AssertionError("hand-written and ragzoo versions give different answers")
    if calls[0] != calls[1]:
        raise AssertionError(f"hand-written and ragzoo versions make different LM calls per question: {calls}")
    return calls[0], calls[1]


def package_split(profile: cProfile.Profile) -> dict[str, float]:
    """Share of own time (tottime) per package: ragzoo, dspy, litellm, tiktoken, pydantic, json_repair, other."""
    stats = pstats.Stats(profile)
    shares: dict[str, float] = {}
    for (filename, _, _), (_, _, tottime, _, _) in stats.stats.items():
        key = _package(filename)
        shares[key] = shares.get(key, 0.0) + tottime
    total = sum(shares.values()) or 1.0
    return {key: value / total for key, value in sorted(shares.items(), key=lambda kv: -kv[1])}


_REPOSITORY = f"{Path(__file__).resolve().parents[1]}{os.sep}"  # ragzoo's checkout, wherever it is cloned


def _package(filename: str) -> str:
    if filename.startswith(_REPOSITORY) and f"{os.sep}.venv{os.sep}" not in filename:
        return "ragzoo"
    return next((name for name in ("dspy", "litellm", "tiktoken", "pydantic", "json_repair", "regex")
                 if f"/{name}/" in filename), "stdlib/other")


def profile_pair(ours, hand, questions: list[str], top: int = 8) -> dict:
    """Profile both sides; where ours spends more own time than hand-written, by function and by package."""
    own: dict[str, dict] = {}
    result = {}
    for label, run in (("ours", ours), ("hand", hand)):
        profile = cProfile.Profile()
        profile.enable()
        for q in questions:
            run(q)
        profile.disable()
        stats = pstats.Stats(profile)
        own[label] = {key: value[2] for key, value in stats.stats.items()}
        result[label] = {"split": package_split(profile), "total_s": stats.total_tt}
    extra = {key: own["ours"].get(key, 0.0) - own["hand"].get(key, 0.0) for key in set(own["ours"]) | set(own["hand"])}
    by_package: dict[str, float] = {}
    for key, delta in extra.items():
        by_package[_package(key[0])] = by_package.get(_package(key[0]), 0.0) + delta
    result["extra_by_package_s"] = dict(sorted(by_package.items(), key=lambda kv: -kv[1]))
    result["extra_top_functions"] = [
        (round(delta, 4), f"{key[0].split('site-packages/')[-1].split(_REPOSITORY)[-1]}:{key[1]}({key[2]})")
        for key, delta in sorted(extra.items(), key=lambda kv: -kv[1])[:top]]
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=20, help="questions (HotPotQA dev, first N)")
    parser.add_argument("--reps", type=int, default=5, help="interleaved repetitions per side")
    parser.add_argument("--retriever", choices=("bm25", "static"), default="bm25")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--profile", action="store_true", help="profile every method, not only the misses")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)

    import dspy

    from ragzoo import data
    from ragzoo.lm import make_dry_run_lm

    from benchmarks.common import markdown_table, write_json

    questions = [example.question for example in data.load("hotpotqa", "dev", n=args.n, seed=None)]
    if args.retriever == "bm25":
        from ragzoo.retrieval import make_retriever
        from ragzoo.retrieval.specs import DEFAULT_RETRIEVER

        retriever = make_retriever(DEFAULT_RETRIEVER)
    else:
        from ragzoo.testing import StaticRetriever, make_passages

        retriever = StaticRetriever(make_passages(20))
    lm = make_dry_run_lm()
    rows, results = [], []
    with dspy.context(lm=lm):
        for method_id in filter(None, args.methods.split(",")):
            ours, hand = ours_runner(method_id, retriever), HAND_WRITTEN[method_id](retriever)
            calls, _ = check_same(ours, hand, questions, lm)  # also warms both paths up
            ours_t, hand_t = interleaved_times(ours, hand, questions, args.reps)
            # Per question: the median over repetitions of each side; summed over questions.
            ours_s = sum(statistics.median(t) for t in ours_t)
            hand_s = sum(statistics.median(t) for t in hand_t)
            ratio = ours_s / hand_s
            ratio_min = sum(map(min, ours_t)) / sum(map(min, hand_t))
            result = {"method": method_id, "lm_calls_per_q": calls, "ours_ms_per_q": 1000 * ours_s / len(questions),
                      "hand_ms_per_q": 1000 * hand_s / len(questions), "ratio": ratio, "ratio_min": ratio_min}
            if ratio > TARGET or args.profile:
                result["profile"] = profile_pair(ours, hand, questions)
            results.append(result)
            rows.append([method_id, f"{calls:g}", f"{result['ours_ms_per_q']:.2f}", f"{result['hand_ms_per_q']:.2f}",
                         f"{ratio:.3f}", f"{result['ratio_min']:.3f}", "yes" if ratio <= TARGET else "NO"])

    print(f"\nPipeline overhead: {len(questions)} HotPotQA dev questions, dry-run LM (zero latency), "
          f"{args.retriever} retriever, median of {args.reps} interleaved repetitions per question\n")
    print(markdown_table(["method", "LM calls/q", "ours ms/q", "hand-written ms/q", "ratio (median)",
                          "ratio (min)", f"<= {TARGET}"], rows))
    for result in results:
        if "profile" in result:
            profile = result["profile"]
            print(f"\nprofile {result['method']}: ours {profile['ours']['total_s']:.3f} s, hand-written "
                  f"{profile['hand']['total_s']:.3f} s (cProfile, {len(questions)} questions)")
            print("  extra own time of ours by package: " + ", ".join(
                f"{k} {1000 * v:+.1f} ms" for k, v in profile["extra_by_package_s"].items()))
            for delta, name in profile["extra_top_functions"][:6]:
                print(f"    {1000 * delta:+7.1f} ms  {name}")
    write_json(args.out, {"questions": len(questions), "retriever": args.retriever, "reps": args.reps,
                          "target": TARGET, "results": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
