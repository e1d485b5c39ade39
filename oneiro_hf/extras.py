"""Optional dependencies: which extra of oneiro-hf brings each, and the error that names the install.

`pip install oneiro-hf` brings what `generate(assistant_model=drafter)`, `oneiro-train` and the `oneiro-bench`
subcommands need; these come as extras (`pip install 'oneiro-hf[all]'` brings them all):

* `bench`: rouge_score (ROUGE-L of the benchmark's quality columns) and matplotlib (its plots);
* `reference`: gguf (converting the reference models from their GGUF files, once per model).
"""

from __future__ import annotations

import importlib.util

EXTRAS = {"rouge_score": "bench", "matplotlib": "bench", "gguf": "reference"}


class MissingExtra(ImportError):
    """An optional dependency is not installed; the message names the `pip install` that brings it."""


def missing_modules(*modules: str) -> list[str]:
    """The modules among `modules` that cannot be imported."""
    return [name for name in modules if importlib.util.find_spec(name) is None]


def install_hint(modules: list[str]) -> str:
    """`pip install 'oneiro-hf[extra,...]'` for the extras that bring `modules`."""
    extras = sorted({EXTRAS[name] for name in modules})
    return f"pip install 'oneiro-hf[{','.join(extras)}]'"


def require(*modules: str, purpose: str) -> None:
    """Raise MissingExtra naming the missing modules, what needs them and the install that fixes it."""
    missing = missing_modules(*modules)
    if missing:
        raise MissingExtra(
            f"{purpose} needs {', '.join(missing)}, which is not installed. Fix: {install_hint(missing)} "
            f"(or pip install {' '.join(missing)})."
        )
