"""A model's attention implementation switched for a block: the one reference count behind `grouped_attention` and
`exact_attention`.

Blocks nest and overlap across threads (threads sharing a target): the first block to start sets the implementation,
the last one to end sets back what the model had. Nothing is stored on the model (weak keys), so a model dropped
inside a block is freed.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch


class AttentionSwitch:
    """Runs models on the attention implementation `name` while any block holding them runs."""

    def __init__(self, name: str) -> None:
        self.name = name
        # per model: (blocks now holding it, the implementation to set back)
        self._users: weakref.WeakKeyDictionary[torch.nn.Module, tuple[int, str]] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def holds(self, model: torch.nn.Module) -> bool:
        """Whether a block runs `model` on this implementation now."""
        return model in self._users

    @contextmanager
    def held(self, model: torch.nn.Module, applies: Callable[[torch.nn.Module], bool]) -> Iterator[bool]:
        """Run `model` on this implementation inside the block where `applies(model)` (asked only when no block
        holds it yet); yields whether it does."""
        with self._lock:
            entry = self._users.get(model)
            active = entry is not None or applies(model)
            if active:
                if entry is None:
                    entry = (0, model.config._attn_implementation)
                    model.set_attn_implementation(self.name)
                self._users[model] = (entry[0] + 1, entry[1])
        try:
            yield active
        finally:
            if active:
                with self._lock:
                    count, own = self._users[model]
                    if count == 1:
                        del self._users[model]
                        model.set_attn_implementation(own)
                    else:
                        self._users[model] = (count - 1, own)
