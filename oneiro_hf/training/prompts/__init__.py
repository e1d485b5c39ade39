"""Prompt sources for self-distillation, one module per source, mixed by `mix` (`--sources`).

The prompts cover the kinds of requests the target will see in use, since a drafter is trained on the target's
own answers to them. Every source but ``public`` (the wheel cache) and ``user`` (the user's file) is built from
the package and the Python standard library alone, so a seed yields the same prompts on any machine.
"""

from .mix import DEFAULT_WEIGHTS, SOURCES, iter_prompts, parse_sources, resolve_exclude
from .public import public_prompts
from .records import Prompt, make_prompt
from .stdlib import stdlib_prompts
from .synthetic import synthetic_prompts
from .user import load_user_prompts

__all__ = ["DEFAULT_WEIGHTS", "SOURCES", "Prompt", "iter_prompts", "load_user_prompts", "make_prompt",
           "parse_sources", "public_prompts", "resolve_exclude", "stdlib_prompts", "synthetic_prompts"]
