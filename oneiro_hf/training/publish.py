"""`oneiro-train --push_to_hub`: the publishing plan, checked before any training, and the one upload at the end."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from .pipeline import TrainingInputError


@dataclass
class HubPlan:
    """Where and how `--push_to_hub` publishes the finished drafter (checked before any training)."""

    repo_id: str
    base_model: str
    license: str
    target: str
    private: bool | None
    token: str | None
    revision: str | None


def plan_hub_push(model_args, args) -> HubPlan | None:
    """The publishing plan for --push_to_hub, or None; TrainingInputError naming the missing flag.

    The Trainer's own pushing (a repo created at start, checkpoints uploaded during training) is switched off:
    the drafter is published once, at the end, with its model card, by `oneiro_hf.storage.hub.publish_drafter`.
    """
    from ..storage.hub import REPO_ID_PATTERN, is_repo_id

    if not args.push_to_hub:
        return None
    repo_id = args.hub_model_id
    if not repo_id or not REPO_ID_PATTERN.fullmatch(repo_id):
        raise TrainingInputError(f"--push_to_hub needs --hub_model_id org/name (got {repo_id!r}).")
    if not model_args.license:
        raise TrainingInputError(
            "--push_to_hub needs --license: the drafter's layers are copies of the target's weights, so publish it "
            "under the target's license (e.g. --license apache-2.0)."
        )
    base_model = model_args.target_hub_id
    if base_model is None and is_repo_id(model_args.target):
        base_model = model_args.target
    if not is_repo_id(base_model):  # the same rule the card applies at the end, checked before training
        raise TrainingInputError(
            f"--push_to_hub needs the target's Hub repo id for the card's base_model; --target {model_args.target} "
            "is not one. Fix: add --target_hub_id org/name."
        )
    plan = HubPlan(repo_id, base_model, model_args.license, model_args.target, args.hub_private_repo, args.hub_token,
                   getattr(args, "hub_revision", None))
    args.push_to_hub = False
    return plan


def publish_trained_drafter(plan: HubPlan, target, out: Path, save_dtype: str) -> int:
    """Publish the drafter saved in `out` (loaded onto `target`, as users will), stored as it was saved (whole, or
    relative to the target after --relative_layer_rank); on failure say how to retry (the local drafter stays
    where it is)."""
    from .. import OneiroDrafter, OneiroDrafterConfig
    from ..storage.hub import publish_drafter
    from ..storage.target_relative import RelativeStorage

    storage = RelativeStorage.from_config(OneiroDrafterConfig.from_pretrained(str(out)))
    drafter = OneiroDrafter.from_pretrained(str(out), target=target)

    summary = out / "training_summary.json"
    try:
        info = publish_drafter(
            drafter,
            plan.repo_id,
            base_model=plan.base_model,
            license=plan.license,
            training_info=summary if summary.is_file() else None,
            dtype=save_dtype,
            storage=storage,
            private=plan.private,
            token=plan.token,
            revision=plan.revision,
        )
    except Exception as err:  # noqa: BLE001 - any failure is reported with the way to retry
        print(
            f"oneiro-train: publishing to {plan.repo_id} failed ({type(err).__name__}: {err}). The drafter is saved "
            f"in {out}; retry with: python examples/publish.py --target {plan.target} --drafter {out} "
            f"--repo-id {plan.repo_id} --license {plan.license} --base-model {plan.base_model}",
            file=sys.stderr,
        )
        return 1
    print(f"Published to {plan.repo_id} ({getattr(info, 'oid', None) or info}).")
    return 0
