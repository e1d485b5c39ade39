"""Pins the transformers versions whose private generation internals oneiro-hf hooks into.

`GenerationMixin._get_candidate_generator` and the `_assisted_decoding` loop are private and change
between minor releases, so we support exactly the versions we test and refuse others loudly.
"""

from __future__ import annotations

from packaging.version import Version

SUPPORTED_TRANSFORMERS = (Version("5.24.0"), Version("5.25.0"))  # [low, high)


class UnsupportedTransformersVersion(RuntimeError):
    """Raised when the installed transformers is outside the range oneiro-hf was tested with."""


def check_transformers_version(version: str | None = None) -> None:
    """Raise a clear error when `version` (default: the installed one) is outside the supported range."""
    if version is None:
        import transformers

        version = transformers.__version__
    low, high = SUPPORTED_TRANSFORMERS
    parsed = Version(version)
    if not (low <= Version(parsed.base_version) < high):
        raise UnsupportedTransformersVersion(
            f"oneiro-hf supports transformers >={low},<{high} but found {version}. It hooks the private "
            f"assisted-decoding loop, which changes between releases. Fix: pip install 'transformers>={low},<{high}'."
        )
