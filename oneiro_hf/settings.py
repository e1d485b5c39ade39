"""Drafting settings of one generate call: each declared once, as a field of `DraftingSettings`.

A field's declaration (`setting(default, doc=..., check=...)`) is everything oneiro-hf knows about that
setting; the rest is derived from it, so adding a setting is one new field:

* the drafter's config takes it as a keyword argument, stores it (saved in config.json; a config written before
  the setting existed loads with its default) and reads it back as the call's default
  (`OneiroDrafterConfig`, `DraftingSettings.from_config`), under `config_name` (`draft_mode` for `mode`);
* a generate call overrides it with `oneiro_<name>=` (generation/hook.py strips the prefix, `for_call` validates);
* `validate()` runs its `check`, whose message names the problem and the fix;
* the tree loop reads it through `EngineView`, a view over these fields (oneiro_hf/generation/loop/custom_generate.py);
* docs/api.md and README.md show the table `settings_table()` renders from the declarations (tests/test_docs.py).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# how a drafted token is judged (oneiro_hf.generation.verification applies them): strict is lossless
VERIFICATION_CRITERIA = ("strict", "topk", "threshold")

DRAFT_MODES = ("latent", "lookup", "hybrid")
KWARG_PREFIX = "oneiro_"

# A check gets the setting's name, its value and all of the call's settings (for rules between settings); it
# returns None for a usable value, else the message of the ValueError: the problem, then "Fix: ...".
Check = Callable[[str, Any, "DraftingSettings"], "str | None"]


def setting(default: Any, *, doc: str, check: Check | None = None, config_name: str | None = None) -> Any:
    """Declare one drafting setting: its default, what it does (the docs table's text), the check of its value,
    and the config field it is stored under when that is not its own name."""
    return dataclasses.field(default=default, metadata={"doc": doc, "check": check, "config_name": config_name})


def _is_whole(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _fix(name: str) -> str:
    """`Fix: pass oneiro_<name>=<its default>.`: the fix every range check offers."""
    return f"Fix: pass {KWARG_PREFIX}{name}={_FIELDS[name].default!r}."


def _at_least_one(name: str, value: Any, settings: DraftingSettings) -> str | None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or int(value) < 1:
        return f"{name} must be >= 1 (got {value!r}). {_fix(name)}"
    return None


def _whole_at_least_one(name: str, value: Any, settings: DraftingSettings) -> str | None:
    if not _is_whole(value) or value < 1:
        return f"{name} must be a whole number >= 1 (got {value!r}). {_fix(name)}"
    return None


def _mode_check(name: str, value: Any, settings: DraftingSettings) -> str | None:
    if value not in DRAFT_MODES:
        return f"unknown draft mode '{value}'. Choose one of {', '.join(DRAFT_MODES)}. {_fix(name)}"
    return None


def _lookup_ngrams_check(name: str, value: Any, settings: DraftingSettings) -> str | None:
    if not 1 <= int(settings.lookup_min_ngram) <= int(settings.lookup_max_ngram):
        return (
            f"need 1 <= lookup_min_ngram <= lookup_max_ngram (got {settings.lookup_min_ngram} and "
            f"{settings.lookup_max_ngram}). Fix: pass e.g. oneiro_lookup_min_ngram=2, oneiro_lookup_max_ngram=4."
        )
    return None


def _prepack_max_memory_check(name: str, value: Any, settings: DraftingSettings) -> str | None:
    if value is not None and (not _is_real(value) or not 0 <= value):
        return (f"{name} is a fraction >= 0 of the target's bytes, or None (got {value!r}). "
                "Fix: pass e.g. 0.45, or None.")
    return None


def _exact_kernels_check(name: str, value: Any, settings: DraftingSettings) -> str | None:
    if value is not None and not isinstance(value, bool):
        return f"{name} is True, False or None (got {value!r}). Fix: pass None (exact for 16-bit targets)."
    return None


def _tree_lookup_min_ngram_check(name: str, value: Any, settings: DraftingSettings) -> str | None:
    if not 1 <= int(value) <= int(settings.lookup_max_ngram):
        return (
            f"need 1 <= tree_lookup_min_ngram <= lookup_max_ngram (got {value} and {settings.lookup_max_ngram}). "
            "Fix: pass oneiro_tree_lookup_min_ngram=1."
        )
    return None


def _context_window_check(name: str, value: Any, settings: DraftingSettings) -> str | None:
    if value is not None and (not _is_whole(value) or value < 1):
        return (
            f"context_window must be a whole number of positions >= 1, or None for no bound (got {value!r}). "
            "Fix: pass oneiro_context_window=1024 (the training length), or None to feed the whole prompt."
        )
    return None


def _verification_check(name: str, value: Any, settings: DraftingSettings) -> str | None:
    if value not in VERIFICATION_CRITERIA:
        return (
            f"unknown verification criterion {value!r}. Fix: choose one of {', '.join(VERIFICATION_CRITERIA)} "
            "(e.g. oneiro_verification='topk')."
        )
    return None


def _verification_topk_check(name: str, value: Any, settings: DraftingSettings) -> str | None:
    if not _is_whole(value) or int(value) < 1:
        return f"verification_topk must be an integer >= 1 (got {value!r}). Fix: pass e.g. oneiro_verification_topk=3."
    return None


def _verification_threshold_check(name: str, value: Any, settings: DraftingSettings) -> str | None:
    if not _is_real(value) or not math.isfinite(float(value)) or not 0.0 < float(value) <= 1.0:
        return (
            f"verification_threshold must be a number in (0, 1] (got {value!r}): a drafted token is kept when "
            "p(draft) >= threshold * p(target's top token). Fix: pass e.g. oneiro_verification_threshold=0.3."
        )
    return None


def _verification_min_entropy_check(name: str, value: Any, settings: DraftingSettings) -> str | None:
    if not _is_real(value) or not math.isfinite(float(value)) or float(value) < 0.0:
        return (
            f"verification_min_entropy must be a finite number >= 0 in nats (got {value!r}); 0 applies the relaxed "
            "rule at every position. Fix: pass e.g. oneiro_verification_min_entropy=0.0."
        )
    return None


def _tree_check(name: str, value: Any, settings: DraftingSettings) -> str | None:
    if value and settings.verification != "strict":
        return (
            f"tree verification is lossless only; verification={settings.verification!r} is a lossy chain "
            "criterion. Fix: drop oneiro_verification (strict), or use oneiro_tree=False for relaxed chains."
        )
    return None


@dataclass(frozen=True)
class DraftingSettings:
    """How one generate call drafts: `DraftingSession.settings` (`drafter.drafting_settings(**overrides)` returns
    them as a dict). Each field is the one declaration of a setting (see the module docstring)."""

    mode: str = setting(
        "hybrid", config_name="draft_mode", check=_mode_check,
        doc='`"hybrid"` (lookup when an n-gram matches, else latent), `"latent"`, `"lookup"`',
    )
    max_draft_tokens: int = setting(8, check=_at_least_one, doc="longest draft per verification, >= 1")
    min_draft_confidence: float = setting(0.05, doc="stop a latent draft below this readout probability")
    lookup_min_ngram: int = setting(
        2, check=_lookup_ngrams_check, doc="shortest n-gram a lookup draft must match, >= 1"
    )
    lookup_max_ngram: int = setting(4, doc="longest n-gram tried, >= `lookup_min_ngram`")
    lookup_after_latent: bool = setting(
        True,
        doc="hybrid: `True` continues a latent draft with lookup's continuation of the drafter's own last tokens "
        "(the cost model keeps what pays); `False`: latent drafts stay the drafter's alone",
    )
    cost_aware: bool = setting(
        True, doc="`True`: draft length by expected tokens per second; `False`: always draft up to the limit"
    )
    prepack_cpu_weights: bool = setting(
        True,
        doc="float32 targets on a CPU: `True` runs the target's linear layers, and the drafter's, on weights "
        "reordered once for oneDNN, per layer shape from the row count measured to pay on this machine (a second "
        "copy of those weights, kept with each model; `oneiro_hf.cpu_kernels`); `False`: torch's own `F.linear`",
    )
    prepack_max_memory: float | None = setting(
        None, check=_prepack_max_memory_check,
        doc="with `prepack_cpu_weights`: the reordered copies take at most this fraction of each model's own bytes, "
        "the layers that save the most time per byte first (at 0.45 a float32 Qwen2.5-Coder-1.5B ran 107 of its 197 "
        "linear layers prepacked); `None`: every layer that gains is copied",
    )
    exact_kernels: bool | None = setting(
        None, check=_exact_kernels_check,
        doc="on a CPU, `True` runs the target on kernels that give each row of a verification pass the bits of a "
        "one-token step (exact attention; every linear on one kernel at every row count): identical to greedy on the "
        "same kernels by construction; `None`: for bfloat16 and float16 targets (float32 then runs the faster grouped "
        "attention, its identity resting on near-ties being rare); `False`: never (`oneiro_hf.cpu_kernels`)",
    )
    context_window: int | None = setting(
        1024, check=_context_window_check,
        doc="the drafter's first catch-up feeds only this many latest verified positions (at their absolute "
        "positions), >= 1; default: the sequence length drafters are trained on (`oneiro-train --max_seq_len`); "
        "`None`: the whole prompt",
    )
    verification: str = setting(
        "strict", check=_verification_check,
        doc='`"strict"` (lossless), `"topk"`, `"threshold"` (both lossy, greedy only)',
    )
    verification_topk: int = setting(
        3, check=_verification_topk_check, doc="`topk`: keep a draft among the target's top k, integer >= 1"
    )
    verification_threshold: float = setting(
        0.3, check=_verification_threshold_check, doc="`threshold`: keep when p(draft) >= t x p(top), t in (0, 1]"
    )
    verification_min_entropy: float = setting(
        0.0, check=_verification_min_entropy_check,
        doc="relax only where the target's entropy (nats) is at least this; 0: everywhere",
    )
    tree: bool = setting(
        False, check=_tree_check,
        doc="`True`: verify a token tree per target pass (lossless, greedy or sampling, strict verification "
        "only: a call with relaxed verification drafts chains; see below); the shipped drafters' configs set it",
    )
    tree_max_nodes: int = setting(
        32, check=_at_least_one, doc="candidate nodes per tree pass at most (the cost model picks within), >= 1"
    )
    tree_max_depth: int = setting(8, check=_at_least_one, doc="tokens per branch at most, >= 1")
    tree_topk: int = setting(
        8, check=_at_least_one, doc="latent branches: the drafter's top k below each expanded node, >= 1"
    )
    tree_beam: int = setting(
        8, check=_at_least_one,
        doc="latent branches: nodes expanded per level (EAGLE-2 style, likeliest first), >= 1",
    )
    tree_lookup_branches: int = setting(
        8, check=_at_least_one, doc="lookup branches: continuations of different earlier occurrences, >= 1"
    )
    tree_lookup_min_ngram: int = setting(
        1, check=_tree_lookup_min_ngram_check,
        doc="lookup branches: shorter suffix matches, down to this, fill nodes after the drafter's turn, each "
        "priced by its n-gram's learned acceptance (chains: `lookup_min_ngram`), 1..`lookup_max_ngram`",
    )
    suffix_memory: bool = setting(
        False,
        doc="`True`: the drafter remembers what it wrote across its calls and a batch's rows (`drafter.suffix_memory`) "
        "and drafts the continuations seen most often after the current suffix as branches beside lookup's and the "
        "drafter's, priced by their learned acceptance; pays on repeated tasks (one output shape for many inputs); "
        "`drafter.reset_memory()` forgets it",
    )
    suffix_memory_tokens: int = setting(
        16384, check=_whole_at_least_one,
        doc="with `suffix_memory`: tokens kept at most, over every call and row; the oldest go first, >= 1",
    )
    suffix_memory_prompts: bool = setting(
        False, doc="with `suffix_memory`: `True` also learns the prompts' tokens; `False`: outputs only",
    )

    @classmethod
    def from_config(cls, config: Any) -> DraftingSettings:
        """The defaults a drafter's config records (a config written before a setting existed: its default)."""
        return cls(**{f.name: getattr(config, config_name(f.name), f.default) for f in dataclasses.fields(cls)})

    @classmethod
    def for_call(cls, config: Any, **overrides: Any) -> DraftingSettings:
        """One generate call's settings: `config`'s defaults, then `overrides` (oneiro_* kwargs without the
        prefix), validated. A call that relaxes verification drafts chains where the config's default is a tree
        (trees verify losslessly only); asking for both in one call is refused by the check."""
        if "tree" not in overrides and overrides.get("verification", "strict") != "strict":
            overrides = {**overrides, "tree": False}
        return cls.from_config(config).replace(**overrides).validate()

    def replace(self, **overrides: Any) -> DraftingSettings:
        """These settings with `overrides` (names without the `oneiro_` prefix); TypeError for an unknown name."""
        for key in overrides:
            if key not in _FIELDS:
                raise TypeError(f"unknown oneiro setting '{key}'. Known: {', '.join(sorted(_FIELDS))}")
        return dataclasses.replace(self, **overrides)

    def validate(self) -> DraftingSettings:
        """Self, if every value passes its declared check; else a ValueError naming the setting and the fix.

        Checks run in declaration order, so the first bad setting is the one reported."""
        for field in dataclasses.fields(self):
            check = field.metadata["check"]
            problem = check(field.name, getattr(self, field.name), self) if check is not None else None
            if problem is not None:
                raise ValueError(problem)
        return self

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


_FIELDS: dict[str, dataclasses.Field] = {f.name: f for f in dataclasses.fields(DraftingSettings)}
DEFAULTS = DraftingSettings()
# The default mode, declared here only. A drafter the library builds (`OneiroDrafter.from_target`) drafts chains,
# which run on every supported transformers and take every generate argument; a drafter oneiro-train ships records
# trees in its config, measured faster than chains on all three reference targets (docs/benchmarks/default_mode/);
# a call overrides either with oneiro_tree.
TRAINED_DRAFTER_SETTINGS: dict[str, Any] = {"tree": True}


def config_name(name: str) -> str:
    """The config field a setting is stored under: its own name unless its declaration says otherwise."""
    return _FIELDS[name].metadata["config_name"] or name


def config_defaults() -> dict[str, Any]:
    """Config field name -> default, for every setting: the drafting keyword arguments of the config."""
    return {config_name(f.name): f.default for f in dataclasses.fields(DraftingSettings)}


def settings_table() -> str:
    """The markdown table of every setting (per-call keyword, config field, default, what it does) that
    docs/api.md and README.md show; tests/test_docs.py checks both against it."""
    rows = [
        "| per-call keyword | config field | default | values |",
        "|---|---|---|---|",
    ]
    for field in dataclasses.fields(DraftingSettings):
        rows.append(
            f"| `{KWARG_PREFIX}{field.name}` | `{config_name(field.name)}` | `{field.default!r}` | "
            f"{field.metadata['doc']} |"
        )
    return "\n".join(rows) + "\n"
