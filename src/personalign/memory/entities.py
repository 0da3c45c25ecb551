"""Exact context-factor matching: named entities found without a model, compared by content words.

Without an extraction model the engine still knows the capitalised names a user mentions ("Professor
Ines Okafor", "Brookfield High Parent-Teacher Association"). A request matches a stored unit when one
of the request's names (or a memory's context factor) is contained word for word in the other side;
"Brookfield Science Olympiad Team" never matches "Brookfield High Parent-Teacher Association".
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Sequence

from personalign.retrieval.lexical import tokenize

# Capitalised words (with inner hyphens/apostrophes), optionally joined by short lowercase connectors.
_CAP = r"[A-Z][\w'’-]*"
_SPAN = re.compile(rf"{_CAP}(?:\s+(?:(?:of|the|for|de|la|van|von)\s+)?{_CAP})*")
_SENTENCE_START = re.compile(r"(?:^|[.!?:;\n]\s*|[\"“(]\s*)$")
# Capitalised words that are not names when they stand alone.
_COMMON_TEXT = """
    can could would should will please thanks thank hi hello hey yes no okay ok sure great also but so
    here there this that these those what when where which who why how our my your their its we they he she
    let let's i'm i've i'd i'll it's that's monday tuesday wednesday thursday friday saturday sunday
    january february march april may june july august september october november december ai"""
_COMMON = frozenset(_COMMON_TEXT.split())


def entity_spans(text: str) -> list[str]:
    """Capitalised name spans in ``text``; a lone capitalised word counts only mid-sentence."""
    spans: list[str] = []
    for match in _SPAN.finditer(text):
        span = match.group(0)
        words = span.split()
        at_start = bool(_SENTENCE_START.search(text[: match.start()]))
        if len(words) == 1 and (at_start or span.lower() in _COMMON):
            continue
        if at_start and words[0].lower() in _COMMON:
            words = words[1:]
            if len(words) < 2 and (not words or words[0].lower() in _COMMON):
                continue
            span = " ".join(words)
        if tokenize(span):
            spans.append(span)
    return spans


def entity_keys(text: str) -> tuple[frozenset[str], ...]:
    """The content-word sets of the names in ``text``, in order of first mention, without repeats."""
    keys = (frozenset(tokenize(s)) for s in entity_spans(text))
    return tuple(dict.fromkeys(k for k in keys if k))


def factor_matches(factor_words: frozenset[str], request_words: frozenset[str]) -> bool:
    """A context factor applies to a request when all of its content words occur in the request."""
    return bool(factor_words) and factor_words <= request_words


class EntityIndex:
    """Which units mention which names, for exact lookups by a request's names."""

    def __init__(self) -> None:
        self._units: list[frozenset[frozenset[str]]] = []
        self._by_word: dict[str, set[int]] = {}
        self._by_key: dict[frozenset[str], set[int]] = {}

    def __len__(self) -> int:
        return len(self._units)

    def add(self, keys_per_unit: Iterable[Iterable[frozenset[str]]]) -> None:
        for unit_keys in keys_per_unit:
            keys = frozenset(unit_keys)
            position = len(self._units)
            self._units.append(keys)
            for key in keys:
                self._by_key.setdefault(key, set()).add(position)
                for word in key:
                    self._by_word.setdefault(word, set()).add(position)

    def matches(self, request_keys: Sequence[frozenset[str]]) -> dict[int, int]:
        """Units naming the request's names, each with the position (in ``request_keys``) of the
        first of those names it names.

        A unit names a request's name when that name is contained in one of the unit's names, or one
        of the unit's multi-word names is contained in it.
        """
        found: dict[int, int] = {}
        for order, q in enumerate(request_keys):
            units: set[int] = set()
            # the request's name inside a unit's name: units holding every word of it
            posting = sorted((self._by_word.get(w, set()) for w in q), key=len)
            if posting and posting[0]:
                common = set(posting[0]).intersection(*posting[1:])
                if len(q) == 1:  # a unit holding the word has a name containing it
                    units |= common
                else:
                    units |= {u for u in common if any(q <= key for key in self._units[u])}
            # a unit's multi-word name inside the request's name (names are short: few subsets)
            words = sorted(q)
            if 2 <= len(words) <= 8:
                for size in range(2, len(words) + 1):
                    for subset in itertools.combinations(words, size):
                        units |= self._by_key.get(frozenset(subset), set())
            for unit in units:
                found.setdefault(unit, order)
        return found
