"""`SuffixMemory`: what a drafter has written before, kept across its generate calls, as continuation counts.

Speculation pays most where text repeats, and real workloads repeat across requests (one JSON shape for many
documents, tests for one function after another): prompt lookup (`NgramIndex`) sees only the current sequence.
The memory counts, for every context of 1..`MAX_CONTEXT` tokens it has seen in earlier (and the current) outputs,
which token followed and how often, as SuffixDecoding's suffix tree does. Drafting (`build.add_memory_branches`)
matches the longest context the current sequence ends with and hangs the continuations seen most often below the
root, each priced by the acceptance calibrated for its share of the counts (`DraftPolicyState.memory_rate`).

* **Bounded.** At most `max_tokens` tokens are kept, over all documents (one document per sequence drafted:
  each row of each call). Past it the oldest tokens go first (FIFO, whole documents before the current ones), and
  every count they made is taken back, so the table holds exactly the kept tokens' contexts: at most
  `MAX_CONTEXT` entries per kept token.
* **Per drafter, in memory only.** A drafter holds its own (`MemoryOwner`); nothing is shared between drafters
  (`copy_for` starts empty) or written to disk. `drafter.reset_memory()` forgets it.

No library is used: arctic-inference's C++ suffix tree ships only as a source distribution that builds
vLLM-targeted extensions with cmake against a CUDA-era torch, and a pure-Python count table over short contexts
(one dict update per context length per token) costs microseconds per drafted step.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

# longest context counted by default; the longest one the sequence ends with is matched first. Longer contexts do
# not draft better: replaying a 48-question job (docs/benchmarks/suffix_memory, `replay.py --max-context 16` and 32)
# gave the same hit rates and the same chain bound as 8
MAX_CONTEXT = 8
Counts = dict[tuple[int, ...], dict[int, int]]  # context -> next token -> how often


@dataclass(eq=False)
class MemoryDocument:
    """One sequence's tokens in the memory: `tokens[i]` is the (start + i)-th token; a continuation is counted
    only from `learn_from` on (earlier tokens are the prompt's end, context only unless prompts are learned)."""

    tokens: deque[int] = field(default_factory=deque)
    start: int = 0  # absolute index of tokens[0] (older ones were evicted)
    learn_from: int = 0  # absolute index of the first token counted as a continuation
    evicted: bool = False  # every token of it was evicted and it left the memory's list (it rejoins on `extend`)

    @property
    def end(self) -> int:
        return self.start + len(self.tokens)


class SuffixMemory:
    """Continuation counts of every context of 1..`max_context` tokens in the kept tokens, at most `max_tokens` kept."""

    def __init__(self, max_tokens: int, max_context: int = MAX_CONTEXT) -> None:
        if int(max_context) < 1:
            raise ValueError(f"max_context must be >= 1 (got {max_context}). Fix: e.g. max_context={MAX_CONTEXT}.")
        self.max_tokens, self.max_context = int(max_tokens), int(max_context)
        self._next: dict[tuple[int, ...], dict[int, int]] = {}
        self._documents: deque[MemoryDocument] = deque()  # oldest first
        self.kept = 0  # tokens held over all documents

    @property
    def entries(self) -> int:
        """Distinct contexts counted (what the memory's size grows with; at most `max_context` per kept token)."""
        return len(self._next)

    def resize(self, max_tokens: int) -> None:
        """Keep at most `max_tokens` tokens from now on, evicting the oldest at once."""
        self.max_tokens = int(max_tokens)
        self._evict()

    # -------------------------------------------------------------- writing
    def open(self, prompt: list[int], learn_prompt: bool = False, own: Counts | None = None) -> MemoryDocument:
        """A new document for one sequence, starting with its `prompt`: every token of it counted
        (`learn_prompt`), or only its last `max_context` tokens kept as the context of the first output token."""
        tokens = list(prompt) if learn_prompt else list(prompt[-self.max_context:])
        document = MemoryDocument(learn_from=0 if learn_prompt else len(tokens))
        self._documents.append(document)
        self.extend(document, tokens, own)
        return document

    def extend(self, document: MemoryDocument, tokens: list[int], own: Counts | None = None) -> None:
        """Append `tokens` to `document`, counting each as the continuation of the contexts before it (and in
        `own`, the writer's record of what its document counted, which `continuations` can leave out)."""
        if document.evicted:  # evicted whole while it was still being written: it goes on as the newest document
            document.evicted = False
            self._documents.append(document)
        table, doc = self._next, document.tokens
        for token in tokens:
            token = int(token)
            index = document.end
            doc.append(token)
            if index >= document.learn_from:
                for n in range(1, min(self.max_context, index - document.start) + 1):
                    key = tuple(doc[i] for i in range(len(doc) - 1 - n, len(doc) - 1))
                    counts = table.setdefault(key, {})
                    counts[token] = counts.get(token, 0) + 1
                    if own is not None:
                        mine = own.setdefault(key, {})
                        mine[token] = mine.get(token, 0) + 1
        self.kept += len(tokens)
        self._evict()

    def _evict(self) -> None:
        while self.kept > self.max_tokens and self._documents:
            document = self._documents[0]
            if not document.tokens:
                self._documents.popleft().evicted = True
                continue
            self._drop_first(document)
            self.kept -= 1

    def _drop_first(self, document: MemoryDocument) -> None:
        """Forget `document`'s oldest token: the counts whose context starts there."""
        doc, start = document.tokens, document.start
        for n in range(1, self.max_context + 1):
            index = start + n  # the continuation of the n-token context starting at `start`
            if index >= document.end:
                break
            if index < document.learn_from:
                continue
            key = tuple(doc[i] for i in range(n))
            counts = self._next[key]
            token = doc[n]
            counts[token] -= 1
            if not counts[token]:
                del counts[token]
                if not counts:
                    del self._next[key]
        doc.popleft()
        document.start += 1

    # -------------------------------------------------------------- reading
    def continuations(self, tail: list[int] | tuple[int, ...], exclude: Counts | None = None
                      ) -> tuple[dict[int, int], int]:
        """The counts of what followed the longest context `tail` ends with, and that context's length (0: none).

        `exclude`: counts to leave out (a sequence's own, as `extend(..., own=...)` recorded them: what the
        sequence itself wrote is prompt lookup's to draft; once its own tokens are evicted they may hide a few of
        the others' counts, which costs acceptance, never correctness)."""
        for n in range(min(self.max_context, len(tail)), 0, -1):
            key = tuple(tail[len(tail) - n:])
            counts = self._next.get(key)
            mine = exclude.get(key) if exclude is not None and counts else None
            if mine:
                counts = {token: count - mine.get(token, 0) for token, count in counts.items()
                          if count > mine.get(token, 0)}
            if counts:
                return counts, n
        return {}, 0


class MemoryOwner:
    """The suffix memory a drafter keeps across its generate calls (mixed into `OneiroDrafter`)."""

    @property
    def suffix_memory(self) -> SuffixMemory | None:
        """What this drafter has written, kept while `suffix_memory` is on in its calls; None before the first such
        call and after `reset_memory()`. Assign one (e.g. kept elsewhere) to draft from it in the next call."""
        return self.__dict__.get("_suffix_memory")

    @suffix_memory.setter
    def suffix_memory(self, memory: SuffixMemory | None) -> None:
        if memory is not None and not isinstance(memory, SuffixMemory):
            raise TypeError(f"suffix_memory must be a SuffixMemory or None, got {type(memory).__name__}. "
                            "Fix: assign a value read from drafter.suffix_memory, or call drafter.reset_memory().")
        self.__dict__["_suffix_memory"] = memory

    def reset_memory(self) -> None:
        """Forget every token the suffix memory kept (the next call with `oneiro_suffix_memory=True` starts empty)."""
        self.suffix_memory = None

    def memory_for(self, settings: Any) -> SuffixMemory | None:
        """The memory a call with these `DraftingSettings` drafts from and writes to (None when it is off), sized to
        its `suffix_memory_tokens`."""
        if not settings.suffix_memory:
            return None
        memory = self.suffix_memory
        if memory is None:
            memory = SuffixMemory(settings.suffix_memory_tokens)
            self.suffix_memory = memory
        elif memory.max_tokens != settings.suffix_memory_tokens:
            memory.resize(settings.suffix_memory_tokens)
        return memory
