"""Prompt lookup: propose a continuation by copying what followed the latest earlier occurrence of the
current n-gram suffix in prompt + output so far.

The index is incremental (each position is hashed once per generate call), so a lookup costs O(new
tokens) rather than a scan of the whole context every step.
"""

from __future__ import annotations

from collections import deque


class NgramIndex:
    """Maps each n-gram (min_n..max_n) to the latest position right after one of its occurrences.

    With `keep_occurrences=k > 0` it also remembers the k latest such positions per n-gram, so that
    `continuations` can offer what followed several earlier occurrences (tree drafts).
    """

    def __init__(self, min_n: int, max_n: int, keep_occurrences: int = 0) -> None:
        self.min_n, self.max_n = min_n, max_n
        self.tokens: list[int] = []
        self._table: dict[tuple[int, ...], int] = {}
        self._indexed_until = 0  # n-grams ending at positions < this are in the table
        self.keep_occurrences = int(keep_occurrences)
        self._occurrences: dict[tuple[int, ...], deque[int]] = {}

    @property
    def entries(self) -> int:
        """Distinct n-grams indexed so far (memory probes read it: the table grows with the text, one entry each).
        A property, not `__len__`: an index must stay truthy while empty."""
        return len(self._table)

    def extend(self, new_tokens: list[int]) -> None:
        self.tokens.extend(new_tokens)

    def _index_up_to(self, end: int) -> None:
        toks = self.tokens
        for e in range(max(self._indexed_until, 1), end):
            for n in range(self.min_n, self.max_n + 1):
                if e - n < 0:
                    break
                key = tuple(toks[e - n : e])
                self._table[key] = e
                if self.keep_occurrences:
                    self._occurrences.setdefault(key, deque(maxlen=self.keep_occurrences)).append(e)
        self._indexed_until = max(self._indexed_until, end)

    def lookup(self, max_tokens: int, after: list[int] | tuple[int, ...] = ()) -> tuple[list[int], int]:
        """Continuation (up to max_tokens) for the longest matching suffix, and that suffix's length n.

        Only occurrences that end before the last position count, so the suffix never matches itself. `after`:
        drafted tokens that follow the indexed ones (not indexed themselves); the suffix then ends with them, and
        the continuation is still copied from the indexed tokens.
        """
        toks = self.tokens
        length = len(toks)
        self._index_up_to(length)  # n-grams ending at length-1 at most (continuation exists)
        tail = toks[max(0, length - self.max_n):] + list(after)
        for n in range(min(self.max_n, length + len(after) - 1), self.min_n - 1, -1):
            e = self._table.get(tuple(tail[len(tail) - n :]))
            if e is not None and e < length:
                return toks[e : min(e + max_tokens, length)], n
        return [], 0

    def continuations(self, max_tokens: int, max_count: int) -> list[tuple[list[int], int]]:
        """Up to `max_count` different continuations (each up to max_tokens) and the n of the n-gram matched.

        Longest n first, most recent occurrence first within an n; continuations equal to one already taken
        are skipped. Needs `keep_occurrences > 0`.
        """
        if not self.keep_occurrences:
            raise ValueError("continuations needs NgramIndex(..., keep_occurrences=k) with k > 0")
        toks = self.tokens
        length = len(toks)
        self._index_up_to(length)
        found: list[tuple[list[int], int]] = []
        seen: set[tuple[int, ...]] = set()
        for n in range(min(self.max_n, length - 1), self.min_n - 1, -1):
            for e in reversed(self._occurrences.get(tuple(toks[length - n :]), ())):
                cont = toks[e : min(e + max_tokens, length)]
                if e < length and cont and tuple(cont) not in seen:
                    seen.add(tuple(cont))
                    found.append((cont, n))
                    if len(found) == max_count:
                        return found
        return found
