"""Checks a drafter checkpoint directory before transformers tries to load it, so a broken or partial
download fails with a message that names the missing piece instead of a deep stack trace."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .configuration_oneiro import OneiroDrafterConfig

CURRENT_FORMAT = 1


class CorruptCheckpoint(ValueError):
    """A drafter checkpoint is missing files or has unreadable contents."""


def check_checkpoint_dir(path: str | os.PathLike, load_kwargs: dict[str, Any] | None = None) -> None:
    """Validate a local checkpoint directory (remote ids are checked after download by transformers)."""
    directory = Path(path)
    if not directory.is_dir():
        return  # a Hub repo id: resolved and downloaded by transformers/huggingface_hub
    config_path = directory / "config.json"
    if not config_path.is_file():
        raise CorruptCheckpoint(
            f"{directory} has no config.json, so it is not a complete drafter checkpoint. Fix: point to the "
            "directory written by drafter.save_pretrained(...), or re-download it."
        )
    try:
        config = json.loads(config_path.read_text())
    except json.JSONDecodeError as err:
        raise CorruptCheckpoint(f"{config_path} is not valid JSON ({err}). Fix: re-save or re-download it.") from err
    if not isinstance(config, dict):
        raise CorruptCheckpoint(f"{config_path} must hold a JSON object. Fix: re-save or re-download the drafter.")
    if config.get("model_type") != OneiroDrafterConfig.model_type:
        raise CorruptCheckpoint(
            f"{directory} holds a '{config.get('model_type')}' model, not a OneiroDrafter. Fix: pass a drafter "
            "checkpoint; the target model is passed separately as target=model."
        )
    try:
        version = int(config.get("oneiro_version", "1"))
    except (TypeError, ValueError) as err:
        raise CorruptCheckpoint(
            f"{config_path} has an unreadable oneiro_version {config.get('oneiro_version')!r}. Fix: re-save or "
            "re-download the drafter."
        ) from err
    if version > CURRENT_FORMAT:
        raise CorruptCheckpoint(
            f"{directory} was written by a newer oneiro-hf (checkpoint format {version}, this one reads "
            f"{CURRENT_FORMAT}). Fix: pip install --upgrade oneiro-hf."
        )
    weights = list(directory.glob("*.safetensors"))
    if not weights:
        raise CorruptCheckpoint(
            f"{directory} has a config but no .safetensors weights (an interrupted save or download?). Fix: "
            "re-run save_pretrained or re-download the drafter."
        )
    from safetensors import safe_open

    for file in weights:
        try:
            with safe_open(str(file), framework="pt") as handle:
                keys = list(handle.keys())
                if keys:
                    handle.get_slice(keys[-1])[:]
        except Exception as err:  # safetensors raises several types for truncation/corruption
            raise CorruptCheckpoint(
                f"{file} is corrupt or truncated ({err}). Fix: re-download or re-save the drafter."
            ) from err
