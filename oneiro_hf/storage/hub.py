"""Publish a drafter on the Hub: its files, a generated model card, and one commit through huggingface_hub.

    from oneiro_hf.storage.hub import publish_drafter
    publish_drafter(drafter, "your-org/your-drafter", base_model="org/target", license="apache-2.0",
                    bench_summary="runs/bench/summary.json", training_info="out/training_summary.json")

`prepare_upload` writes exactly the folder that would be uploaded (for a dry run or a review). The card itself
is oneiro_hf.storage.cards' (`build_model_card`, `write_model_card`, re-exported here); publishing builds it before
anything is written, so a card that does not fit the drafter stops the upload. `OneiroDrafter.push_to_hub`
calls `publish_drafter`; this module never imports the modeling code.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

# the card names are re-exported: oneiro_hf.storage.hub is where users publish from
from .cards import (
    CARD_NAME,
    DEFAULT_TEMPLATE,
    EXAMPLE_REPO_ID,
    TRAINING_INFO_NAME,
    ModelCardError,
    build_model_card,
    is_repo_id,
    load_json_input,
    recorded_training_info,
    write_model_card,
)
from .checkpoint import CONFIG_NAME, WEIGHTS_NAME, save_whole

if TYPE_CHECKING:
    from huggingface_hub import CommitInfo
    from transformers import PreTrainedModel

    from .target_relative import RelativeStorage

REPO_ID_PATTERN = re.compile(r"[^/\s]+/[^/\s]+")  # what publish_drafter accepts as the repository to create

__all__ = [
    "DEFAULT_TEMPLATE",
    "REPO_ID_PATTERN",
    "ModelCardError",
    "build_model_card",
    "is_repo_id",
    "prepare_upload",
    "publish_drafter",
    "write_model_card",
]


# ============================================================================================== upload
def prepare_upload(
    drafter: PreTrainedModel,
    folder: str | os.PathLike,
    *,
    repo_id: str | None = None,
    dtype: torch.dtype | str | None = None,
    **card_kwargs: Any,
) -> list[Path]:
    """Write everything a publish uploads into `folder` and return the files, README.md included.

    config.json and model.safetensors (drafter weights only, including `draft_vocab_ids`, the draft
    vocabulary mapping), README.md, and training_summary.json when training info is known. The card is
    built first, so a card check failure leaves `folder` untouched. `dtype` None writes the weights in the
    dtype training saved them in (the training info's `save_dtype`), not in the dtype they follow in memory
    (a drafter bound to a float32 target holds float32 copies of bfloat16 weights); with no training info, as
    in memory. `storage` (a oneiro_hf.storage.target_relative.RelativeStorage, among the card arguments) writes only
    the weights' differences from the target, and the card says so.
    """
    training_info = card_kwargs.get("training_info")
    info = load_json_input(training_info, "training info") if training_info is not None else recorded_training_info(drafter)
    if dtype is None and info is not None:
        dtype = info.get("save_dtype")
    torch_dtype = getattr(torch, dtype, None) if isinstance(dtype, str) else dtype
    if dtype is not None and (not isinstance(torch_dtype, torch.dtype) or not torch_dtype.is_floating_point):
        raise ValueError(f"dtype must be a floating point dtype such as 'bfloat16', got {dtype!r}.")
    card = build_model_card(drafter, repo_id=repo_id, dtype=torch_dtype, **{**card_kwargs, "training_info": info})
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    clash = [p.name for p in out.iterdir()]
    if clash:
        raise FileExistsError(f"{out} is not empty ({', '.join(sorted(clash))}). Fix: pass an empty or new folder.")
    storage = card_kwargs.get("storage")
    if storage is not None:  # only the differences from the target (oneiro_hf.storage.target_relative)
        from .target_relative import save_target_relative

        save_target_relative(drafter, out, storage, dtype=torch_dtype)
    else:
        save_whole(drafter, out, torch_dtype)
    config_path = out / CONFIG_NAME
    data = json.loads(config_path.read_text())
    # the published drafter belongs to the card's Hub model, not to the local copy it was trained from, so
    # that from_pretrained(repo_id, target=<that Hub model>) passes the base-model check
    data["base_model_name_or_path"] = card.data.base_model
    config_path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    if not (out / WEIGHTS_NAME).is_file():
        raise RuntimeError(f"save_pretrained did not write {WEIGHTS_NAME} into {out}; nothing to publish.")
    card.save(out / CARD_NAME)
    if info is not None:
        (out / TRAINING_INFO_NAME).write_text(json.dumps(info, indent=1, default=str) + "\n")
    return sorted(p for p in out.iterdir() if p.is_file())


def publish_drafter(
    drafter: PreTrainedModel,
    repo_id: str,
    *,
    base_model: str | None = None,
    license: str | None = None,
    bench_summary: dict | str | os.PathLike | None = None,
    training_info: dict | str | os.PathLike | None = None,
    hardware: str | None = None,
    tags: list[str] | None = None,
    datasets: list[str] | None = None,
    dtype: torch.dtype | str | None = None,
    template_path: str | os.PathLike | None = None,
    allow_base_model_mismatch: bool = False,
    storage: RelativeStorage | None = None,
    private: bool | None = None,
    token: str | bool | None = None,
    revision: str | None = None,
    create_pr: bool = False,
    commit_message: str | None = None,
    commit_description: str | None = None,
) -> CommitInfo:
    """Create `repo_id` if needed and upload the drafter's files and card in one commit; returns its CommitInfo."""
    from huggingface_hub import CommitOperationAdd, HfApi

    if not REPO_ID_PATTERN.fullmatch(repo_id or ""):
        raise ValueError(f"repo_id {repo_id!r} must be 'org/name' (e.g. {EXAMPLE_REPO_ID!r}).")
    api = HfApi(token=token, library_name="oneiro-hf")
    with tempfile.TemporaryDirectory(prefix="oneiro-publish-") as tmp:
        files = prepare_upload(
            drafter,
            tmp,
            repo_id=repo_id,
            dtype=dtype,
            base_model=base_model,
            license=license,
            bench_summary=bench_summary,
            training_info=training_info,
            hardware=hardware,
            tags=tags,
            datasets=datasets,
            template_path=template_path,
            allow_base_model_mismatch=allow_base_model_mismatch,
            storage=storage,
        )
        repo = api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
        operations = [CommitOperationAdd(path_in_repo=f.name, path_or_fileobj=str(f)) for f in files]
        return api.create_commit(
            repo.repo_id,
            operations,
            commit_message=commit_message or "Upload OneiroDraft drafter",
            commit_description=commit_description,
            revision=revision,
            create_pr=create_pr,
        )
