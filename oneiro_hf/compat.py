"""Which transformers releases oneiro-hf runs on: the tested range, known breaks, and what happens outside.

The integration replaces `_get_candidate_generator` on a target instance and relies on the assisted-decoding
loop calling it (docs/design.md, "The hook into transformers"). Those are private internals, so:

* below `MIN_TRANSFORMERS` (the oldest release the losslessness suite passed on): refused, with the fix;
* a release listed in `KNOWN_BREAKS`: refused, naming what breaks and the fix;
* newer than `TESTED_UP_TO` (the newest minor release tested): allowed with one warning, since most releases
  keep the hook working and CI of a later oneiro-hf will say;
* anything else: silent.
"""

from __future__ import annotations

import warnings

from packaging.specifiers import SpecifierSet
from packaging.version import Version

MIN_TRANSFORMERS = Version("5.18.0")
TESTED_UP_TO = Version("5.25")  # every 5.25.x release; later ones are untested (5.25.0: the fast suite, docs/design.md)
# releases in which the hook is known not to work: (specifier, what breaks); none known at present
KNOWN_BREAKS: tuple[tuple[str, str], ...] = ()
# tree verification (oneiro_tree=True) runs its own loop, written against 5.24's keywords (`cache`, not
# `past_key_values`) and tested there only
TREE_MIN_TRANSFORMERS = Version("5.24.0")
# `output_hidden_states=[i, ...]` (a selection) returns the full tuple's entries i, None elsewhere, on 5.24; 5.18 reads
# a selection as decoder-layer indices (entry i is the output of layer i, no embeddings entry), so below this release
# a selection is asked as True (every state), which means the same on every release
HIDDEN_STATES_SELECTION_MIN = Version("5.24.0")
# kept for callers of 0.1.0: the tested range as [low, high)
SUPPORTED_TRANSFORMERS = (MIN_TRANSFORMERS, Version(f"{TESTED_UP_TO.major}.{TESTED_UP_TO.minor + 1}.0"))


class UnsupportedTransformersVersion(RuntimeError):
    """Raised when the installed transformers is too old for oneiro-hf or a release known to break it."""


class UntestedTransformersVersion(UserWarning):
    """The installed transformers is newer than any release oneiro-hf was tested with."""


_warned: set[str] = set()


def check_transformers_version(version: str | None = None) -> None:
    """Refuse a too-old or known-broken transformers `version` (default: the installed one); warn once if untested."""
    if version is None:
        import transformers

        version = transformers.__version__
    release = Version(Version(version).base_version)  # 5.24.1.dev0 and 5.24.0rc1 count as their release
    if release < MIN_TRANSFORMERS:
        raise UnsupportedTransformersVersion(
            f"oneiro-hf needs transformers >={MIN_TRANSFORMERS} but found {version}. Fix: pip install "
            f"'transformers>={MIN_TRANSFORMERS}'."
        )
    for specifier, why in KNOWN_BREAKS:
        if release in SpecifierSet(specifier):
            raise UnsupportedTransformersVersion(
                f"transformers {version} is known not to work with oneiro-hf ({why}). Fix: pip install "
                f"'transformers>={MIN_TRANSFORMERS},!={version}' (a release outside {specifier})."
            )
    newest_tested = Version(f"{TESTED_UP_TO.major}.{TESTED_UP_TO.minor + 1}.0")
    if release >= newest_tested and version not in _warned:
        _warned.add(version)
        warnings.warn(
            f"oneiro-hf was tested with transformers {MIN_TRANSFORMERS} to {TESTED_UP_TO}.x; {version} is newer. "
            "The integration hooks private generation internals: if generate fails inside oneiro-hf, install a "
            f"tested release (pip install 'transformers<{newest_tested}') or upgrade oneiro-hf.",
            UntestedTransformersVersion,
            stacklevel=2,
        )


def check_tree_supported(version: str | None = None, batch: bool = False) -> None:
    """Refuse oneiro_tree=True, or a batch of prompts with a drafter (`batch`: the batched loop is built on the tree
    loop), on a transformers older than the tree loop was written and tested for."""
    if version is None:
        import transformers

        version = transformers.__version__
    if Version(Version(version).base_version) < TREE_MIN_TRANSFORMERS:
        what, other = ("a batch of prompts with a drafter", "or call generate once per prompt") if batch else (
            "tree drafting (oneiro_tree=True, or a drafter whose config sets tree)",
            f"or pass oneiro_tree=False (chain drafting works from {MIN_TRANSFORMERS})")
        raise UnsupportedTransformersVersion(
            f"{what} needs transformers >={TREE_MIN_TRANSFORMERS} (its own decoding loop is tested there "
            f"only); found {version}. Fix: pip install 'transformers>={TREE_MIN_TRANSFORMERS}', {other}."
        )


def cache_keyword(module_cls: type) -> str:
    """The keyword `module_cls.forward` takes its KV cache by: `cache` in recent releases, `past_key_values` before.

    The version shim for calling the target's own modules (its decoder layers, or the whole model) with a cache.
    """
    import inspect

    parameters = inspect.signature(module_cls.forward).parameters
    if "cache" in parameters:
        return "cache"
    if "past_key_values" in parameters:
        return "past_key_values"
    raise UnsupportedTransformersVersion(
        f"{module_cls.__name__}.forward takes neither `cache` nor `past_key_values`, so oneiro-hf cannot give it a KV "
        f"cache. Fix: pip install 'transformers>={MIN_TRANSFORMERS},<{SUPPORTED_TRANSFORMERS[1]}'."
    )


def hidden_states_selection(indices: list[int], version: str | None = None) -> list[int] | bool:
    """What to pass as `output_hidden_states` to get the full tuple's entries `indices` (0 the embeddings, i the
    output of decoder layer i-1) on the installed transformers (or `version`): the list itself from
    `HIDDEN_STATES_SELECTION_MIN` on, else True (every state: more memory, the same indexing)."""
    if version is None:
        import transformers

        version = transformers.__version__
    return list(indices) if Version(Version(version).base_version) >= HIDDEN_STATES_SELECTION_MIN else True
