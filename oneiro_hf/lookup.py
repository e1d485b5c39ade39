"""Prompt lookup: propose a continuation by copying what followed the latest earlier occurrence of the
current n-gram suffix in prompt + output so far.

The index is incremental (each position is hashed once per generate call), so a lookup costs O(new
tokens) rather than a scan of the whole context every step.
"""

from __future__ import annotations


class NgramIndex:
    """Maps each n-gram (min_n..max_n) to the latest position right after one of its occurrences."""

    def __init__(self, min_n: int, max_n: int) -> None:
        self.min_n, self.max_n = min_n, max_n
        self.tokens: list[int] = []
        self._table: dict[tuple[int, ...], int] = {}
        self._indexed_until = 0  # n-grams ending at positions < this are in the table

    def extend(self, new_tokens: list[int]) -> None:
        self.tokens.extend(new_tokens)

    def _index_up_to(self, end: int) -> None:
        toks = self.tokens
        for e in range(max(self._indexed_until, 1), end):
            for n in range(self.min_n, self.max_n + 1):
                if e - n < 0:
                    break
                self._table[tuple(toks[e - n : e])] = e
        self._indexed_until = max(self._indexed_until, end)

    def lookup(self, max_tokens: int) -> tuple[list[int], int]:
        """Continuation (up to max_tokens) for the longest matching suffix, and that suffix's length n.

        Only occurrences that end before the last position count, so the suffix never matches itself.
        """
        toks = self.tokens
        length = len(toks)
        self._index_up_to(length)  # n-grams ending at length-1 at most (continuation exists)
        for n in range(min(self.max_n, length - 1), self.min_n - 1, -1):
            e = self._table.get(tuple(toks[length - n :]))
            if e is not None and e < length:
                return toks[e : min(e + max_tokens, length)], n
        return [], 0
