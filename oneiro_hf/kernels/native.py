"""Small C kernels compiled once per machine with the system's C compiler and loaded with ctypes.

oneiro-hf's exact kernels (`exact_attention.c`, `half_linear.c`) are plain C with OpenMP, built on first use with
`cc` (or `$CC`) and `-march=native` into oneiro-hf's cache (`~/.cache/oneiro-hf/kernels`, keyed by source, flags
and CPU), so a wheel ships no binaries and each machine gets code for its own vector units. `NativeKernel` is one
such kernel: `function()` builds and loads it (once per process), `available()` says whether that worked and
`unavailable_reason()` why not, with the fix.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from importlib import resources
from pathlib import Path

from ..storage.reference_models import default_cache_dir

# -ffp-contract=off: the compiler fuses no multiply and add the source did not fuse (every kernel's order of
# rounding is the one its source states)
COMPILE_FLAGS = ("-O3", "-march=native", "-ffp-contract=off", "-fopenmp", "-shared", "-fPIC")


class KernelUnavailable(RuntimeError):
    """A native kernel could not be compiled or loaded on this machine (the message says why and how to fix it)."""


def cpu_flags() -> str:
    """The CPU's feature flags as /proc/cpuinfo lists them ("" where it cannot be read): part of a build's key."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line
    except OSError:
        pass
    return ""


def _build(name: str, source: bytes, target: Path) -> None:
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise KernelUnavailable(
            f"no C compiler found to build oneiro-hf's {name}. Fix: install one (e.g. `apt-get install gcc`) or "
            "set $CC.")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        src = Path(tmp) / f"{target.stem}.c"
        src.write_bytes(source)
        built = Path(tmp) / target.name
        try:
            result = subprocess.run([compiler, *COMPILE_FLAGS, str(src), "-o", str(built), "-lm"], check=False,
                                    capture_output=True, text=True)
        except OSError as error:
            raise KernelUnavailable(
                f"the C compiler {compiler} could not run ({error}). Fix: install a C compiler with OpenMP support "
                "(gcc) or set $CC to one.") from error
        if result.returncode != 0:
            raise KernelUnavailable(
                f"compiling oneiro-hf's {name} with {compiler} failed:\n{result.stderr[-2000:]}\n"
                "Fix: install a C compiler with OpenMP support (gcc) or set $CC to one.")
        os.replace(built, target)  # atomic: a concurrent process sees the whole library or none


class NativeKernel:
    """One C function of a source file in `oneiro_hf.kernels`, built on first use and loaded once per process.

    `name` says what it is in messages; `symbol`, `argtypes` and `restype` describe the function for ctypes."""

    def __init__(self, source: str, symbol: str, argtypes: list, restype=ctypes.c_int, name: str | None = None):
        self.source, self.symbol, self.argtypes, self.restype = source, symbol, argtypes, restype
        self.name = name or f"{Path(source).stem.replace('_', ' ')} kernel"
        self._function = None
        self._failure: str | None = None
        self._lock = threading.Lock()

    def function(self):
        """The loaded C function; KernelUnavailable (with the fix) when it cannot be built or loaded here. A
        failure is remembered for the process (one compile attempt, one reason)."""
        with self._lock:
            if self._function is not None:
                return self._function
            if self._failure is not None:
                raise KernelUnavailable(self._failure)
            source = resources.files("oneiro_hf.kernels").joinpath(self.source).read_bytes()
            key = hashlib.sha256(source + " ".join(COMPILE_FLAGS).encode() + cpu_flags().encode()).hexdigest()[:16]
            path = default_cache_dir() / "kernels" / f"{Path(self.source).stem}-{key}.so"
            try:
                if not path.exists():
                    _build(self.name, source, path)
                function = getattr(ctypes.CDLL(str(path)), self.symbol)
            except (KernelUnavailable, OSError, AttributeError) as error:
                self._failure = str(error)
                raise KernelUnavailable(self._failure) from error
            function.restype, function.argtypes = self.restype, self.argtypes
            self._function = function
            return function

    def available(self) -> bool:
        """Whether the kernel builds and loads here (the first call may compile it: about a second)."""
        try:
            self.function()
        except KernelUnavailable:
            return False
        return True

    def unavailable_reason(self) -> str | None:
        """Why the kernel is not available (None when it is, or before anything tried to load it)."""
        return self._failure

    def forget(self) -> None:
        """Drop the loaded function and any remembered failure, so the next call builds or loads it again (tests
        that take the compiler away)."""
        with self._lock:
            self._function, self._failure = None, None
