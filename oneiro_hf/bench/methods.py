"""The decoding methods the benchmark compares, and how a `--methods` entry becomes generate kwargs."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from .answers import BenchInputError
from .report import KERNELS_SUFFIX, ONEIRO_GREEDY, is_lossless, is_relaxed, kernels_of

BASE_METHODS = (
    "greedy",
    ONEIRO_GREEDY,
    "hf-lookup",
    "hf-lookup" + KERNELS_SUFFIX,
    "hf-early-exit",
    "hf-assistant",
    "oneiro-lookup",
    "oneiro-latent",
    "oneiro-hybrid",
    "oneiro-tree",
    "oneiro-suffix",
)
DEFAULT_METHODS = ("greedy", ONEIRO_GREEDY, "hf-lookup", "oneiro-lookup", "oneiro-latent", "oneiro-hybrid",
                   "oneiro-tree")
HF_METHODS = ("hf-lookup", "hf-early-exit", "hf-assistant")  # each also runs as <name>-kernels
RELAXED_PATTERNS = ("oneiro-topk-<K>", "oneiro-threshold-<T>")
FIXED_LATENT_PATTERN = "oneiro-latent-fixed-<N>"
TREE_PATTERN = "oneiro-tree-<N>"  # tree verification with at most N candidate nodes per pass
FIXED_TREE_PATTERN = "oneiro-tree-fixed-<N>"  # N nodes every pass, cost model off (the trees a flat GPU profile picks)
HF_LOOKUP_TOKENS = 10


@dataclass(frozen=True)
class MethodSpec:
    """One decoding method: how to call generate for it."""

    name: str
    generate_kwargs: dict = field(default_factory=dict)  # besides assistant_model
    oneiro_settings: dict = field(default_factory=dict)  # passed as oneiro_<key>=value
    drafter_name: str | None = None  # an --extra-drafter; None: the --drafter one

    @property
    def uses_drafter(self) -> bool:
        return self.name.startswith("oneiro-") and self.name != ONEIRO_GREEDY

    @property
    def uses_assistant(self) -> bool:
        return self.name.removesuffix(KERNELS_SUFFIX) == "hf-assistant"

    @property
    def kernels(self) -> str:
        """"oneiro": the target runs inside `oneiro_hf.cpu_kernels` (every oneiro-* method, and the
        `-kernels` variants of transformers' methods); "stock": transformers' own kernels."""
        return kernels_of(self.name)

    @property
    def lossless(self) -> bool:
        return is_lossless(self.name)

    @property
    def relaxed(self) -> bool:
        return is_relaxed(self.name)


def _method_help() -> str:
    return (f"Known methods: {', '.join(BASE_METHODS)}, {', '.join(m + KERNELS_SUFFIX for m in HF_METHODS[1:])}, "
            f"{FIXED_LATENT_PATTERN}, {TREE_PATTERN}, {FIXED_TREE_PATTERN}, and "
            f"{', '.join(RELAXED_PATTERNS)}; any oneiro-* method "
            "may end in @NAME to use the drafter given by --extra-drafter NAME=PATH.")


DRAFTER_NAME = re.compile(r"[A-Za-z0-9_.-]+")

# methods that end in a whole number >= 1: (prefix, what the number is, an example, the settings it makes)
_NUMBERED = (
    ("oneiro-tree-fixed-", "N", 16,
     lambda n: {"mode": "hybrid", "tree": True, "tree_max_nodes": n, "cost_aware": False}),
    ("oneiro-tree-", "N", 8, lambda n: {"mode": "hybrid", "tree": True, "tree_max_nodes": n}),
    ("oneiro-latent-fixed-", "N", 4, lambda n: {"mode": "latent", "max_draft_tokens": n, "cost_aware": False,
                                                 "min_draft_confidence": 0.0, "tree": False}),
    ("oneiro-topk-", "K", 2, lambda k: {"mode": "hybrid", "verification": "topk", "verification_topk": k}),
)


def parse_method(name: str, early_exit_layer: int = 4) -> MethodSpec:
    """The MethodSpec for a --methods entry; BenchInputError for an unknown or malformed one."""
    if "@" in name:
        base, drafter_name = name.split("@", 1)
        if not base.startswith("oneiro-") or base == ONEIRO_GREEDY or not DRAFTER_NAME.fullmatch(drafter_name):
            raise BenchInputError(f"method {name!r}: only oneiro-* methods take a drafter suffix, written "
                                  "oneiro-<mode>@NAME with NAME from --extra-drafter NAME=PATH.")
        spec = parse_method(base, early_exit_layer)
        return MethodSpec(name, spec.generate_kwargs, spec.oneiro_settings, drafter_name)
    if name in ("greedy", ONEIRO_GREEDY):
        return MethodSpec(name)
    if name.endswith(KERNELS_SUFFIX) and name.removesuffix(KERNELS_SUFFIX) in HF_METHODS:
        spec = parse_method(name.removesuffix(KERNELS_SUFFIX), early_exit_layer)
        return MethodSpec(name, spec.generate_kwargs)
    if name == "hf-lookup":
        return MethodSpec(name, {"prompt_lookup_num_tokens": HF_LOOKUP_TOKENS})
    if name == "hf-early-exit":
        return MethodSpec(name, {"assistant_early_exit": int(early_exit_layer)})
    if name == "hf-assistant":
        return MethodSpec(name)
    if name in ("oneiro-lookup", "oneiro-latent", "oneiro-hybrid"):
        return MethodSpec(name, oneiro_settings={"mode": name.split("-", 1)[1], "tree": False})
    if name == "oneiro-tree":
        return MethodSpec(name, oneiro_settings={"mode": "hybrid", "tree": True})
    if name == "oneiro-suffix":  # the tree with the suffix memory, kept across the run's questions in file order
        return MethodSpec(name, oneiro_settings={"mode": "hybrid", "tree": True, "suffix_memory": True})
    for prefix, letter, example, settings in _NUMBERED:
        if name.startswith(prefix):
            text = name.removeprefix(prefix)
            if not text.isdigit() or int(text) < 1:
                raise BenchInputError(f"method {name!r}: {letter} must be an integer >= 1, e.g. {prefix}{example}.")
            return MethodSpec(name, oneiro_settings=settings(int(text)))
    match = re.fullmatch(r"oneiro-threshold-(\S+)", name)
    if match:
        try:
            t = float(match.group(1))
        except ValueError:
            t = float("nan")
        if not math.isfinite(t) or t <= 0:
            raise BenchInputError(f"method {name!r}: T must be a positive number, e.g. oneiro-threshold-0.1.")
        return MethodSpec(
            name, oneiro_settings={"mode": "hybrid", "verification": "threshold", "verification_threshold": t}
        )
    raise BenchInputError(f"unknown method {name!r}. {_method_help()}")


def parse_methods(text: str, early_exit_layer: int = 4) -> list[MethodSpec]:
    """Comma-separated methods, de-duplicated; greedy first (every ratio is against it), then oneiro-greedy
    whenever any method runs on oneiro-hf's kernels (each speedup is also given against greedy on those)."""
    names = []
    for m in (m.strip() for m in text.split(",")):
        if m and m not in names:
            names.append(m)
    if not names:
        raise BenchInputError(f"--methods is empty. {_method_help()}")
    specs = [parse_method(m, early_exit_layer) for m in names]
    first = [MethodSpec("greedy")]
    if any(s.kernels != "stock" for s in specs):
        first.append(MethodSpec(ONEIRO_GREEDY))
    return first + [s for s in specs if s.name not in ("greedy", ONEIRO_GREEDY)]
