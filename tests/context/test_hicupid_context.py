from __future__ import annotations

import asyncio

import pytest

from personalign.benchmarks.hicupid.context import (
    HICUPID_CONTEXTS,
    ContextOptions,
    ContextSelection,
    Retrieval,
    hit_at_k,
    make_context,
    register_context,
    retrieval_hits,
)
from personalign.benchmarks.hicupid.data import HiCupidDataset, load_hicupid
from personalign.benchmarks.hicupid.schema import HiCupidHistory, HiCupidQA
from personalign.errors import ConfigError

DATA = load_hicupid()
TESTS = DATA.questions(["test_1", "test_2"])


def _qa(qid: str) -> HiCupidQA:
    return next(q for q in DATA.qa if q.id == qid)


def _select(name: str, qid: str, data: HiCupidDataset = DATA) -> ContextSelection:
    qa = _qa(qid)
    return asyncio.run(
        make_context(name, ContextOptions(embedder="hash")).select(data.history(qa.user_id), qa)
    )


def test_full_and_gold_contexts() -> None:
    full = _select("full", "test_1/0#2")
    assert full.dialogue_ids == tuple(range(12)) and full.ranked_dialogue_ids is None
    assert full.messages[0].content.startswith("I finally sent that overhanging route")
    assert [m.role for m in full.messages[:4]] == ["user", "assistant", "user", "assistant"]
    gold = _select("gold", "test_1/0#5")  # multi-info: 5 profile dialogues + the cilantro dialogue
    assert gold.dialogue_ids == (1, 2, 4, 6, 8, 10)  # chronological, not the qa's listing order
    assert any("soapy-tasting" in m.content for m in gold.messages)


def test_retrieved_units_are_shown_in_chronological_order() -> None:
    # "Book a dentist cleaning on 2025-03-18 at 12:00." BM25 over user 4's user turns ranks the
    # matching schedule first, then the other schedules (shared "2025", "00"), then the trail run.
    selection = _select("bm25-utterance-5", "test_2/4#164")
    assert selection.ranked_dialogue_ids == (163, 171, 167, 160)
    assert selection.dialogue_ids == (160, 163, 167, 171)
    contents = [m.content for m in selection.messages]
    assert contents[0].startswith("Ran 18 miles on the ridge trail")  # dialogue 160, the earliest
    assert contents[-2].startswith("Please put this on my calendar: online chess tournament")


def test_utterance_units_index_user_turns_but_show_the_round() -> None:
    # "Recommend a movie for Friday night." matches only "I rewatched Arrival last night ..." (a user
    # turn) and the whole round is shown, the assistant's reply included.
    selection = _select("bm25-utterance-5", "test_1/1#42")
    assert selection.ranked_dialogue_ids == (45,)
    assert [m.role for m in selection.messages] == ["user", "assistant"]
    assert selection.messages[1].content.startswith("It is a thoughtful film")


@pytest.mark.parametrize(
    ("qid", "unit", "k", "ranked", "hit"),
    [
        ("test_1/0#2", "utterance", 5, [], 0.0),  # "listen ... paperwork": no shared term, nothing retrieved
        ("test_1/3#128", "dialogue", 1, [123], 0.0),  # bridge game at the *club* on 05-03: garden club 03-05
        ("test_1/3#128", "utterance", 5, [123, 131, 127], 1.0),  # the recital (131) is second
        ("test_1/2#85", "dialogue", 1, [86], 0.5),  # multi-info: a profile dialogue hit, persona missed
        ("test_1/1#42", "dialogue", 1, [45], 1.0),
    ],
)
def test_bm25_hit_at_k_hand_checked(qid: str, unit: str, k: int, ranked: list[int], hit: float) -> None:
    qa = _qa(qid)
    got = [u.dialogue_id for u in Retrieval("bm25", unit, k).rank(DATA.history(qa.user_id), qa.question, k)]  # type: ignore[arg-type]
    assert got == ranked
    assert hit_at_k(got, qa, k) == hit


def test_hit_at_k_over_the_fixture_per_type() -> None:
    hits = retrieval_hits(DATA.histories, TESTS, "bm25", "dialogue", [1, 12])
    # k=1, by hand from the rankings: persona 4 of 7 (0#2, 3#122, 4#162 miss); schedule 5 of 6 (3#128
    # misses); multi-info profile dialogues 3 of 5, its persona dialogues 0 of 5.
    assert hits[1]["persona"] == pytest.approx(4 / 7)
    assert hits[1]["schedule"] == pytest.approx(5 / 6)
    assert hits[1]["multi_info_profile"] == pytest.approx(3 / 5)
    assert hits[1]["multi_info_persona"] == 0.0
    assert hits[1]["n"] == len(TESTS) == 18
    # With k = the whole history, only questions sharing no term with any dialogue can miss.
    assert hits[12]["schedule"] == 1.0
    assert hits[12]["total"] is not None and hits[12]["total"] > hits[1]["total"]  # type: ignore[operator]


def test_hit_at_k_for_multi_info_averages_the_two_groups() -> None:
    qa = _qa("test_1/0#5")  # gold: profile 1, 4, 6, 8, 10 then persona 2
    assert hit_at_k([4], qa, 1) == 0.5
    assert hit_at_k([2], qa, 1) == 0.5
    assert hit_at_k([9, 2, 10], qa, 3) == 1.0
    assert hit_at_k([9, 2, 10], qa, 1) == 0.0


def test_dense_retrieval_with_the_default_offline_embedder() -> None:
    qa = _qa("test_2/4#161")  # "Suggest a vegetarian dinner recipe." -> the mushrooms dialogue
    strategy = make_context("dense-dialogue-1")  # all-MiniLM-L6-v2 int8 ONNX, offline
    selection = asyncio.run(strategy.select(DATA.history(4), qa))
    assert selection.ranked_dialogue_ids == (162,)


def test_registry_names_and_extension() -> None:
    for name in (
        "full",
        "gold",
        "bm25-utterance-5",
        "bm25-utterance-25",
        "dense-dialogue-1",
        "dense-dialogue-5",
    ):
        assert name in HICUPID_CONTEXTS
    assert make_context("bm25-dialogue-7").name == "bm25-dialogue-7"  # any K
    with pytest.raises(ConfigError, match="unknown HiCUPID context"):
        make_context("summaries")

    class LastDialogue:
        name = "last-dialogue-test"

        async def select(self, history: HiCupidHistory, qa: HiCupidQA) -> ContextSelection:
            last = history.dialogues[-1]
            return ContextSelection(tuple(last.messages()), (last.dialogue_id,))

    register_context("last-dialogue-test", lambda options: LastDialogue())
    try:
        assert _select("last-dialogue-test", "test_1/0#2").dialogue_ids == (11,)
        with pytest.raises(ConfigError, match="already registered"):
            register_context("last-dialogue-test", lambda options: LastDialogue())
    finally:
        del HICUPID_CONTEXTS["last-dialogue-test"]


def test_okapi_bm25_always_returns_k_units_ranked_as_rank_bm25() -> None:
    rank_bm25 = pytest.importorskip("rank_bm25")
    qa = _qa("test_2/4#164")
    history = DATA.history(qa.user_id)
    lucene = Retrieval("bm25", "utterance", 15, ContextOptions())
    okapi = Retrieval("bm25", "utterance", 15, ContextOptions(bm25="okapi"))
    units = okapi.index(history)[0]
    assert len(lucene.rank(history, qa.question, 15)) < 15 <= len(units)  # lucene drops non-matching units
    ranked = okapi.rank(history, qa.question, 15)
    assert len(ranked) == 15
    scores = rank_bm25.BM25Okapi([u.text.split() for u in units]).get_scores(qa.question.split())
    expected = sorted(range(len(scores)), key=lambda i: scores[i], reverse=True)[:15]
    assert [u.position for u in ranked] == [units[i].position for i in expected]
    assert okapi.label == "bm25-utterance-15 (okapi)"


def test_unknown_bm25_variant_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="BM25 variant"):
        ContextOptions(bm25="robertson")  # type: ignore[arg-type]
