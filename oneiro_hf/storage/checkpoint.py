"""Finds and checks a drafter checkpoint before transformers loads it.

A drafter comes from a local directory or a Hub repo id. Hub ids are resolved through huggingface_hub
(revision, cache_dir, token, HF_HUB_OFFLINE / local_files_only, force_download) into a snapshot folder of
the Hub cache, so both cases end in one local directory that is checked here: a broken, partial or
too-new checkpoint fails with a message naming the file, the problem and the fix, instead of a deep
stack trace or, worse, a drafter that silently loaded the wrong thing.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..configuration_oneiro import FORMAT_VERSION, OneiroDrafterConfig

WEIGHTS_NAME = "model.safetensors"
WEIGHTS_INDEX_NAME = "model.safetensors.index.json"
CONFIG_NAME = "config.json"
# from_pretrained keyword arguments that only steer where files come from; consumed by resolve_checkpoint
HUB_KWARGS = ("cache_dir", "force_download", "local_files_only", "token", "revision", "subfolder", "proxies")
_SHA256_NAME = re.compile(r"[0-9a-f]{64}")


class CorruptCheckpoint(ValueError):
    """A drafter checkpoint is missing files or has unreadable contents."""


class IncompatibleCheckpoint(CorruptCheckpoint):
    """A drafter checkpoint was written in a format newer than this oneiro-hf reads."""


class DrafterNotFound(OSError):
    """No drafter checkpoint could be found at the given path or Hub repo id."""


@dataclass(frozen=True)
class ResolvedCheckpoint:
    """Where a drafter's files lie locally, and where they came from (for messages and name_or_path)."""

    directory: Path
    repo_id: str | None = None  # None: a local directory
    revision: str | None = None
    commit: str | None = None
    repo_cache: Path | None = None  # the models--org--name folder of the Hub cache

    def weights_storage(self) -> dict[str, Any] | None:
        """The config's `weights_storage` (None: weights stored whole; see oneiro_hf.storage.target_relative)."""
        return json.loads((self.directory / CONFIG_NAME).read_text()).get("weights_storage")

    def fix(self, file: str | None = None) -> str:
        """What to do about a damaged file of this checkpoint."""
        if self.repo_id is None:
            return "re-save it with drafter.save_pretrained(...) or copy the checkpoint again"
        where = f" (or delete {self.repo_cache})" if self.repo_cache is not None else ""
        return (
            f"download it again: OneiroDrafter.from_pretrained({self.repo_id!r}, target=model, "
            f"force_download=True) while online{where}"
        )


def _looks_like_local_path(text: str) -> bool:
    return (
        text.startswith(("/", ".", "~"))
        or "\\" in text
        or text.count("/") > 1
        or bool(re.match(r"^[A-Za-z]:", text))
    )


def resolve_checkpoint(
    name_or_path: str | os.PathLike,
    *,
    cache_dir: str | os.PathLike | None = None,
    revision: str | None = None,
    token: str | bool | None = None,
    local_files_only: bool = False,
    force_download: bool = False,
    subfolder: str = "",
    proxies: Any = None,
) -> ResolvedCheckpoint:
    """A local directory as given, or a Hub repo id downloaded (or found in the cache) and checked."""
    if proxies:
        raise TypeError(
            "proxies= is not supported by huggingface_hub 1.x+. Fix: set HTTPS_PROXY in the environment instead."
        )
    directory = Path(name_or_path).expanduser()
    if directory.is_dir():
        resolved = ResolvedCheckpoint(directory / subfolder if subfolder else directory)
        check_checkpoint_dir(resolved)
        return resolved
    text = str(name_or_path)
    if directory.exists() or _looks_like_local_path(text):
        raise DrafterNotFound(
            f"{text!r} is not a directory{' (it is a file)' if directory.exists() else ''}, and not a Hub repo id "
            "like 'your-org/your-drafter'. Fix: pass the directory written by drafter.save_pretrained(...) or a "
            "Hub repo id."
        )
    resolved = _download(
        text,
        cache_dir=cache_dir,
        revision=revision,
        token=token,
        local_files_only=local_files_only,
        force_download=force_download,
        subfolder=subfolder,
    )
    check_checkpoint_dir(resolved)
    return resolved


def _download(
    repo_id: str,
    *,
    cache_dir: str | os.PathLike | None,
    revision: str | None,
    token: str | bool | None,
    local_files_only: bool,
    force_download: bool,
    subfolder: str,
) -> ResolvedCheckpoint:
    """Fetch config.json and the weights of `repo_id` into the Hub cache (or find them there when offline)."""
    from huggingface_hub import constants, hf_hub_download

    from ..version import __version__

    offline = bool(local_files_only or constants.is_offline_mode())
    at = f" at revision {revision!r}" if revision else ""
    why_offline = (
        "downloads are off (HF_HUB_OFFLINE=1 or local_files_only=True)"
        if offline
        else "it could not be downloaded (no connection?)"
    )

    def fetch(filename: str) -> Path:
        return Path(
            hf_hub_download(
                repo_id,
                filename,
                subfolder=subfolder or None,
                revision=revision,
                cache_dir=cache_dir,
                force_download=force_download,
                local_files_only=local_files_only,
                token=token,
                library_name="oneiro-hf",
                library_version=__version__,
            )
        )

    config_path = _fetch_config(fetch, repo_id, revision, at, why_offline, cache_dir)
    directory = config_path.parent
    repo_cache = next((p for p in config_path.parents if p.name.startswith("models--")), None)
    snapshot = directory.parents[len(Path(subfolder).parts) - 1] if subfolder else directory
    commit = snapshot.name if snapshot.parent.name == "snapshots" else None
    resolved = ResolvedCheckpoint(directory, repo_id, revision, commit, repo_cache)

    def interrupted(filename: str, err: Exception) -> CorruptCheckpoint:
        partial = sorted(repo_cache.glob("blobs/*.incomplete")) if repo_cache is not None else []
        seen = f"; unfinished downloads lie in {', '.join(str(p) for p in partial)}" if partial else ""
        return CorruptCheckpoint(
            f"The Hub cache holds {CONFIG_NAME} of {repo_id!r}{at} (snapshot {directory}) but not {filename}, and "
            f"{why_offline}: an earlier download was interrupted{seen}. Fix: {resolved.fix()}."
        )

    _fetch_weights(fetch, repo_id, at, interrupted)
    return resolved


def _fetch_config(fetch, repo_id: str, revision: str | None, at: str, why_offline: str,
                  cache_dir: str | os.PathLike | None) -> Path:
    """config.json of the repo, through `fetch`; every way that fails is a DrafterNotFound with its fix."""
    from huggingface_hub import constants
    from huggingface_hub.errors import (
        GatedRepoError,
        HFValidationError,
        LocalEntryNotFoundError,
        RemoteEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    try:
        return fetch(CONFIG_NAME)
    except HFValidationError as err:
        raise DrafterNotFound(
            f"{repo_id!r} is not a local directory and not a valid Hub repo id ({err}). Fix: pass the directory "
            "written by drafter.save_pretrained(...) or a repo id like 'your-org/your-drafter'."
        ) from err
    except GatedRepoError as err:
        raise DrafterNotFound(
            f"Hub repo {repo_id!r} is gated. Fix: accept its terms on the Hub and pass token=... (or log in)."
        ) from err
    except RepositoryNotFoundError as err:
        raise DrafterNotFound(
            f"Hub repo {repo_id!r} was not found (or is private). Fix: check the id, or pass token=... for a "
            "private repo."
        ) from err
    except RevisionNotFoundError as err:
        raise DrafterNotFound(
            f"Hub repo {repo_id!r} has no revision {revision!r}. Fix: pass an existing branch, tag or commit."
        ) from err
    except LocalEntryNotFoundError as err:
        raise DrafterNotFound(
            f"{CONFIG_NAME} of {repo_id!r}{at} is not in the Hub cache ({cache_dir or constants.HF_HUB_CACHE}) "
            f"and {why_offline}. Fix: download it once while online (e.g. `hf download {repo_id}`), pass the "
            "cache_dir that holds it, or pass a local directory."
        ) from err
    except RemoteEntryNotFoundError as err:
        raise DrafterNotFound(
            f"Hub repo {repo_id!r}{at} has no {CONFIG_NAME}, so it is not a drafter checkpoint. Fix: pass the repo "
            "of a drafter published with drafter.push_to_hub(...)."
        ) from err


def _fetch_weights(fetch, repo_id: str, at: str, interrupted) -> None:
    """The weights (one file, or an index and its shards) through `fetch`; a missing or interrupted one is a
    CorruptCheckpoint with its fix."""
    from huggingface_hub.errors import LocalEntryNotFoundError, RemoteEntryNotFoundError

    try:
        fetch(WEIGHTS_NAME)
        return
    except RemoteEntryNotFoundError:
        pass  # a sharded checkpoint: look for the index below
    except LocalEntryNotFoundError as err:
        try:  # a sharded checkpoint whose index is cached?
            index_path = fetch(WEIGHTS_INDEX_NAME)
        except (LocalEntryNotFoundError, RemoteEntryNotFoundError):
            raise interrupted(WEIGHTS_NAME, err) from err
        _fetch_shards(index_path, fetch, interrupted)
        return
    try:
        index_path = fetch(WEIGHTS_INDEX_NAME)
    except RemoteEntryNotFoundError as err:
        raise CorruptCheckpoint(
            f"Hub repo {repo_id!r}{at} has a {CONFIG_NAME} but neither {WEIGHTS_NAME} nor {WEIGHTS_INDEX_NAME}: its "
            "upload is incomplete. Fix: publish the drafter again with drafter.push_to_hub(...)."
        ) from err
    except LocalEntryNotFoundError as err:
        raise interrupted(WEIGHTS_INDEX_NAME, err) from err
    _fetch_shards(index_path, fetch, interrupted)


def _fetch_shards(index_path: Path, fetch, interrupted) -> None:
    from huggingface_hub.errors import EntryNotFoundError

    weight_map = _read_index(index_path)
    for shard in sorted(set(weight_map.values())):
        try:
            fetch(shard)
        except EntryNotFoundError as err:
            raise interrupted(shard, err) from err


def _read_index(index_path: Path) -> dict[str, str]:
    try:
        weight_map = json.loads(index_path.read_text())["weight_map"]
        if not isinstance(weight_map, dict):
            raise TypeError("weight_map is not an object")
    except (ValueError, KeyError, TypeError) as err:
        raise CorruptCheckpoint(
            f"{index_path} is not a valid safetensors index ({err}). Fix: re-save or re-download the drafter."
        ) from err
    return weight_map


def checkpoint_format(config: dict[str, Any], config_path: Path | str = CONFIG_NAME) -> int:
    """The format a drafter config was written in.

    `format_version` is authoritative; oneiro-hf 0.1.0 wrote the format as the string `oneiro_version`, and
    writers since mirror it there, so the larger of the two counts (a too-new file is never read as old).
    """
    formats = []
    for key in ("format_version", "oneiro_version"):
        if key not in config:
            continue
        value = config[key]
        try:
            number = int(value)
            if isinstance(value, bool) or number < 1:
                raise ValueError(value)
        except (TypeError, ValueError) as err:
            raise CorruptCheckpoint(
                f"{config_path} has an unreadable {key} {value!r} (expected an integer >= 1). Fix: re-save or "
                "re-download the drafter."
            ) from err
        formats.append(number)
    return max(formats, default=1)


def check_checkpoint_dir(
    path: str | os.PathLike | ResolvedCheckpoint, load_kwargs: dict[str, Any] | None = None
) -> None:
    """Validate a local checkpoint directory: config, format, weight files and their bytes.

    `load_kwargs` is accepted for callers of the 0.1.0 signature and unused.
    """
    resolved = path if isinstance(path, ResolvedCheckpoint) else ResolvedCheckpoint(Path(path))
    directory = resolved.directory
    if not directory.is_dir():
        raise DrafterNotFound(f"{directory} is not a directory. Fix: pass the folder written by save_pretrained.")
    config_path = directory / CONFIG_NAME
    if not config_path.is_file():
        raise CorruptCheckpoint(
            f"{directory} has no {CONFIG_NAME}, so it is not a complete drafter checkpoint. Fix: point to the "
            f"directory written by drafter.save_pretrained(...), or {resolved.fix()}."
        )
    try:
        config = json.loads(config_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CorruptCheckpoint(f"{config_path} is not valid JSON ({err}). Fix: {resolved.fix()}.") from err
    if not isinstance(config, dict):
        raise CorruptCheckpoint(f"{config_path} must hold a JSON object. Fix: {resolved.fix()}.")
    if config.get("model_type") != OneiroDrafterConfig.model_type:
        raise CorruptCheckpoint(
            f"{directory} holds a '{config.get('model_type')}' model, not a OneiroDrafter. Fix: pass a drafter "
            "checkpoint; the target model is passed separately as target=model."
        )
    version = checkpoint_format(config, config_path)
    if version > FORMAT_VERSION:
        from ..version import __version__

        writer = config.get("oneiro_hf_version")
        by = f"a newer oneiro-hf ({writer})" if writer else "a newer oneiro-hf"
        raise IncompatibleCheckpoint(
            f"{config_path} was written by {by} in checkpoint format {version}; this oneiro-hf ({__version__}) "
            f"reads formats up to {FORMAT_VERSION}, so it cannot load it correctly. Fix: pip install --upgrade "
            "oneiro-hf (or load an older revision of the drafter that was saved in a readable format)."
        )
    index_path = directory / WEIGHTS_INDEX_NAME
    if (directory / WEIGHTS_NAME).is_file():
        weights = [directory / WEIGHTS_NAME]
    elif index_path.is_file():
        weights = [directory / name for name in sorted(set(_read_index(index_path).values()))]
        missing = [w.name for w in weights if not w.is_file()]
        if missing:
            raise CorruptCheckpoint(
                f"{directory} lacks {', '.join(missing)}, listed in {WEIGHTS_INDEX_NAME} (an interrupted save or "
                f"download?). Fix: {resolved.fix()}."
            )
    else:
        weights = sorted(directory.glob("*.safetensors"))
    if not weights:
        raise CorruptCheckpoint(
            f"{directory} has a config but no .safetensors weights ({WEIGHTS_NAME}; an interrupted save or "
            "download?). Fix: "
            f"{resolved.fix()}."
        )
    for file in weights:
        _check_weights_file(file, resolved)


def _check_weights_file(file: Path, resolved: ResolvedCheckpoint) -> None:
    """Read the safetensors header and the last tensor (truncation), and match a Hub blob against its hash."""
    from safetensors import safe_open

    try:
        with safe_open(str(file), framework="pt") as handle:
            keys = list(handle.keys())
            if keys:
                handle.get_slice(keys[-1])[:]
    except Exception as err:  # safetensors raises several types for truncation/corruption
        raise CorruptCheckpoint(
            f"{file} is corrupt or truncated ({err}). Fix: {resolved.fix(file.name)}."
        ) from err
    if resolved.repo_id is None or not file.is_symlink():
        return
    blob = file.resolve()
    if not _SHA256_NAME.fullmatch(blob.name):
        return
    digest = hashlib.sha256()
    with open(blob, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    if digest.hexdigest() != blob.name:
        raise CorruptCheckpoint(
            f"{file} (blob {blob}) is corrupt or truncated: its sha256 is {digest.hexdigest()}, the Hub's is "
            f"{blob.name}. Fix: {resolved.fix(file.name)}."
        )


def save_whole(drafter: Any, out: str | os.PathLike, dtype: Any = None) -> None:
    """config.json and one model.safetensors with every weight, in `dtype` (a torch dtype; default: as in memory),
    which config.json then records (save_pretrained records the dtype in memory)."""
    state = {
        k: (v.detach().to(dtype) if dtype is not None and v.is_floating_point() else v.detach()).cpu().contiguous()
        for k, v in drafter.state_dict().items()
    }
    if "draft_vocab_ids" not in state:
        raise RuntimeError("the drafter's state has no draft_vocab_ids; its checkpoint could not be read back.")
    # one file: a sharded checkpoint would leave stale shards next to a later single file on the Hub
    drafter.save_pretrained(str(out), state_dict=state, safe_serialization=True, max_shard_size="1000GB")
    if dtype is not None:
        config_path = Path(out) / CONFIG_NAME
        config = json.loads(config_path.read_text())
        config["dtype"] = str(dtype).replace("torch.", "")
        config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
