"""Old import paths of modules that moved to their rooms, kept working for one release with a DeprecationWarning.

`import oneiro_hf.exact_attention` (or `from oneiro_hf.exact_attention import exact_attention`, or `python -m
oneiro_hf.reference_models`) finds the module at its new path, `oneiro_hf.kernels.exact_attention`, warns once naming the new
path, and hands back the very same module object: patching or reading either name touches one module.
`oneiro_hf.cpu_kernels` stays the public function (`_Package`).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import CodeType, ModuleType

# old path -> new path, both relative to `oneiro_hf`; removed in the release after next
MOVED = {
    "integration": "generation.hook",
    "assistant_guard": "generation.guard",
    "generate_inputs": "generation.inputs",
    "candidate_generator": "generation.candidate_generator",
    "session": "generation.session",
    "verification": "generation.verification",
    "tree": "generation.loop",
    "tree.batch": "generation.loop.decode",
    "tree.loop": "generation.loop.custom_generate",
    "tree.core": "generation.loop.sequence",
    "tree.cache": "generation.loop.target_cache",
    "tree.verify": "generation.loop.judge",
    "tree.attention": "generation.loop.tree_mask",
    "drafting.settings": "drafting.view",
    "stats": "drafting.stats",
    "kv_cache": "drafting.kv_cache",
    "drafter_context": "drafting.context",
    "latency": "drafting.latency",
    "cpu_kernels": "kernels.cpu",
    "exact_attention": "kernels.exact_attention",
    "grouped_attention": "kernels.grouped_attention",
    "prepacked_linear": "kernels.prepacked_linear",
    "checkpoint": "storage.checkpoint",
    "identity": "storage.identity",
    "target_relative": "storage.target_relative",
    "hub": "storage.hub",
    "cards": "storage.cards",
    "reference_models": "storage.reference_models",
}
PACKAGE = __name__.rpartition(".")[0]


class _Alias(importlib.abc.Loader):
    """Loads an old path as the module at its new path (the same object), after one DeprecationWarning."""

    def __init__(self, new: str) -> None:
        self.new = new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        warnings.warn(
            f"{spec.name} moved to {self.new}; the old path works for one more release. Fix: import {self.new}.",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.import_module(self.new)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module at the new path was executed when it was imported."""

    def get_code(self, name: str) -> CodeType:
        """For `python -m <old path>` (runpy asks the loader for code): code that warns and runs the new path."""
        source = (
            "import runpy, warnings\n"
            f"warnings.warn({name!r} ' moved to ' {self.new!r} '. Fix: python -m ' {self.new!r}, DeprecationWarning)\n"
            f"runpy.run_module({self.new!r}, run_name='__main__', alter_sys=True)\n"
        )
        return compile(source, f"<{name}, moved to {self.new}>", "exec")


class _MovedFinder(importlib.abc.MetaPathFinder):
    """Answers only for the old paths in MOVED; every other import goes on to Python's own finders."""

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(PACKAGE + "."):
            return None
        new = MOVED.get(fullname[len(PACKAGE) + 1 :])
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(f"{PACKAGE}.{new}"), is_package=new == "generation.loop")


class _Package(ModuleType):
    """The package's module type once `install` ran. One old path is also a public name (`cpu_kernels`: the function,
    and the module it lived in); importing the old path sets the package's attribute to the module, as every import
    of a submodule does, and this keeps the public name instead."""

    def __setattr__(self, name: str, value: object) -> None:
        if name in MOVED and isinstance(value, ModuleType) and callable(self.__dict__.get(name)):
            return
        super().__setattr__(name, value)


def install() -> None:
    """Put the finder on `sys.meta_path` once (the package's `__init__` calls this)."""
    sys.modules[PACKAGE].__class__ = _Package
    if not any(isinstance(finder, _MovedFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _MovedFinder())  # before the path finder: an old folder left behind is no package
