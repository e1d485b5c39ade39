"""Target-relative storage: a drafter checkpoint that holds only how its weights differ from its target's.

Each copied layer matrix W is stored as a rank-r difference from the target's own matrix T (W ~= T + A @ B, as
`<matrix>.delta_a` and `<matrix>.delta_b`), the fusion's token-embedding block as identity + A @ B
(`fuse.weight.token.delta_*`, beside `fuse.weight.states`); every other tensor is stored as it is. Loading
rebuilds each matrix from the bound target after checking the target's identity. The truncation changes the
drafter's drafts a little, never the output of strict verification. docs/hub.md ("Target-relative
checkpoints") describes the format, the checks and the measured sizes.
"""

from __future__ import annotations

import copy
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ..targets import DrafterTargetMismatch, base_model
from .checkpoint import WEIGHTS_NAME, CorruptCheckpoint

# what a fine-tune changes: the base model's name or weights (other fields are shapes and architecture)
BASE_FIELDS = ("base_model", "base_weights")

if TYPE_CHECKING:
    from transformers import PreTrainedModel

DELTA_A, DELTA_B = ".delta_a", ".delta_b"
FUSE = "fuse.weight"
FUSE_STATES = "fuse.weight.states"
FUSE_TOKEN = "fuse.weight.token"


@dataclass(frozen=True)
class RelativeStorage:
    """How a drafter is stored relative to its target (the config's `weights_storage`).

    layer_rank: rank of each copied layer matrix's difference from the target's matrix.
    token_rank: rank of the fusion's token-embedding block's difference from the identity; None stores the
        whole fusion as it is.
    """

    layer_rank: int
    token_rank: int | None = None

    def __post_init__(self) -> None:
        for name in ("layer_rank", "token_rank"):
            value = getattr(self, name)
            if value is None and name == "token_rank":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(
                    f"RelativeStorage.{name} must be an integer >= 1 (got {value!r}). Fix: pick the rank by held-out "
                    "acceptance, e.g. layer_rank=32, token_rank=256."
                )

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "target_relative", **asdict(self)}

    @classmethod
    def from_config(cls, config: Any) -> RelativeStorage | None:
        """The storage recorded in a drafter config (None: the weights are stored whole)."""
        data = getattr(config, "weights_storage", None)
        if data is None:
            return None
        if not isinstance(data, dict) or data.get("kind") != "target_relative":
            raise CorruptCheckpoint(
                f"the drafter config's weights_storage {data!r} is not one this oneiro-hf reads. Fix: pip install "
                "--upgrade oneiro-hf, or re-save the drafter."
            )
        return cls(layer_rank=data["layer_rank"], token_rank=data.get("token_rank"))


def _layer_reference(drafter: Any, target: PreTrainedModel, key: str) -> torch.Tensor | None:
    """The target matrix a copied-layer key started from (`layers.i.<name>` -> target layer start+i), else None."""
    parts = key.split(".")
    if parts[0] != "layers" or len(parts) < 3:
        return None
    layer = base_model(target).layers[drafter.config.interval[0] + int(parts[1])]
    tensor = dict(layer.named_parameters()).get(".".join(parts[2:]))
    return None if tensor is None or tensor.dim() != 2 else tensor.detach()


def _low_rank(delta: torch.Tensor, rank: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(A, B) in `dtype` with A @ B the best rank-`rank` approximation of float32 CPU `delta` (truncated SVD)."""
    u, s, vh = torch.linalg.svd(delta, full_matrices=False)
    return (u[:, :rank] * s[:rank]).to(dtype).contiguous(), vh[:rank].to(dtype).contiguous()


def _cheaper(shape: torch.Size | tuple[int, int], rank: int) -> bool:
    return rank * (shape[0] + shape[1]) < shape[0] * shape[1]


def stored_as(key: str, value: torch.Tensor, storage: RelativeStorage) -> str:
    """How `storage` keeps a state-dict tensor: "difference" (a copied layer matrix as rank-r factors), "fuse"
    (the fusion split into its state block and its token block's difference from identity) or "whole"."""
    if key.startswith("layers.") and value.dim() == 2 and _cheaper(value.shape, storage.layer_rank):
        return "difference"
    if key == FUSE and storage.token_rank is not None and _cheaper((value.shape[0],) * 2, storage.token_rank):
        return "fuse"
    return "whole"


def relative_state(
    drafter: Any, storage: RelativeStorage, dtype: torch.dtype | None = None
) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
    """The tensors of a target-relative checkpoint of a bound drafter, and each difference's kept share.

    Returns (tensors in `dtype`, default the drafter's; {matrix name: relative error ||D - A B|| / ||D||}).
    A matrix whose rank-r factors would not be smaller than itself is stored as it is.
    """
    target = drafter.require_bound().model
    state = {k: v.detach() for k, v in drafter.state_dict().items()}
    dtype = dtype or next(drafter.parameters()).dtype
    out: dict[str, torch.Tensor] = {}
    errors: dict[str, float] = {}

    def put_difference(name: str, value: torch.Tensor, reference: torch.Tensor, rank: int) -> None:
        delta = value.float().cpu() - reference.float().cpu()
        a, b = _low_rank(delta, rank, dtype)
        out[name + DELTA_A], out[name + DELTA_B] = a, b
        norm = float(delta.norm())
        errors[name] = float((delta - a.float() @ b.float()).norm()) / norm if norm > 0 else 0.0

    for key, value in state.items():
        kind = stored_as(key, value, storage)
        if kind == "difference":
            put_difference(key, value, _layer_reference(drafter, target, key), storage.layer_rank)
        elif kind == "fuse":
            hidden = value.shape[0]
            out[FUSE_STATES] = value[:, :-hidden].cpu().to(dtype).contiguous()
            put_difference(FUSE_TOKEN, value[:, -hidden:], torch.eye(hidden), storage.token_rank)
        else:
            out[key] = (value.cpu().to(dtype) if value.is_floating_point() else value.cpu()).contiguous()
    return out, errors


def absolute_state(
    tensors: dict[str, torch.Tensor], drafter: Any, target: PreTrainedModel, dtype: torch.dtype
) -> dict[str, torch.Tensor]:
    """The drafter's state dict rebuilt from a target-relative checkpoint's `tensors` and its `target`.

    Each matrix is rebuilt in float32 from the target's and rounded once to `dtype` (the checkpoint's), so it
    holds what a whole checkpoint of the same drafter would. Raises CorruptCheckpoint naming missing tensors.
    """
    rebuilt: dict[str, torch.Tensor] = {}
    missing: list[str] = []
    used: set[str] = set()

    def difference(name: str, shape: tuple[int, int]) -> torch.Tensor | None:
        if name + DELTA_A not in tensors or name + DELTA_B not in tensors:
            return None
        used.update((name + DELTA_A, name + DELTA_B))
        a, b = tensors[name + DELTA_A], tensors[name + DELTA_B]
        _check_factors(name, a, b, shape)
        return a.float() @ b.float()

    for key, like in drafter.state_dict().items():
        if key in tensors:
            _check_shape(key, tensors[key], tuple(like.shape))
            rebuilt[key] = tensors[key]
            used.add(key)
            continue
        if key == FUSE and FUSE_STATES in tensors:
            hidden = like.shape[0]
            token = difference(FUSE_TOKEN, (hidden, hidden))
            if token is not None:
                used.add(FUSE_STATES)
                _check_shape(FUSE_STATES, tensors[FUSE_STATES], (hidden, like.shape[1] - hidden))
                token = token + torch.eye(hidden)
                rebuilt[key] = torch.cat([tensors[FUSE_STATES].float(), token], dim=1).to(dtype)
                continue
        delta = difference(key, tuple(like.shape)) if like.dim() == 2 else None
        reference = _layer_reference(drafter, target, key)
        if delta is None or reference is None:
            missing.append(key)
            continue
        rebuilt[key] = (reference.float().cpu() + delta).to(dtype)
    unexpected = sorted(set(tensors) - used)
    if missing or unexpected:
        raise CorruptCheckpoint(
            f"the target-relative checkpoint lacks {len(missing)} tensor(s) (e.g. {missing[:3]}) and has "
            f"{len(unexpected)} unknown one(s) (e.g. {unexpected[:3]}). Fix: save it again with "
            "save_target_relative(drafter, folder, storage), or download it again."
        )
    return rebuilt


_SHAPE_FIX = ("Fix: download the drafter again, or save it again with save_target_relative(drafter, folder, storage) "
              "from the drafter it was made from.")


def _check_shape(name: str, tensor: torch.Tensor, shape: tuple[int, ...]) -> None:
    """CorruptCheckpoint unless a tensor stored as it is has the shape the drafter's state dict needs."""
    if tuple(tensor.shape) != shape:
        raise CorruptCheckpoint(
            f"the target-relative checkpoint's {name} has shape {tuple(tensor.shape)}, but this drafter (as its "
            f"config.json describes it) needs {shape}. {_SHAPE_FIX}"
        )


def _check_factors(name: str, a: torch.Tensor, b: torch.Tensor, shape: tuple[int, int]) -> None:
    """CorruptCheckpoint unless `a` @ `b` can rebuild the difference of an (out, in) = `shape` matrix: a of
    (out, r), b of (r, in)."""
    rows, cols = shape
    if a.dim() == 2 and b.dim() == 2 and a.shape[0] == rows and b.shape[1] == cols and a.shape[1] == b.shape[0]:
        return
    raise CorruptCheckpoint(
        f"the target-relative checkpoint's difference factors of {name} have shapes {tuple(a.shape)} "
        f"({name}{DELTA_A}) and {tuple(b.shape)} ({name}{DELTA_B}); rebuilding its {rows}x{cols} matrix needs "
        f"({rows}, r) and (r, {cols}) for one rank r. {_SHAPE_FIX}"
    )


def save_target_relative(drafter: Any, folder: str | Path, storage: RelativeStorage,
                         dtype: torch.dtype | None = None) -> dict[str, float]:
    """Write config.json and a target-relative model.safetensors of a bound drafter into `folder`.

    Returns each stored difference's relative truncation error (see relative_state).
    """
    from safetensors.torch import save_file

    tensors, errors = relative_state(drafter, storage, dtype)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config = copy.deepcopy(drafter.config)
    config.weights_storage = storage.to_dict()  # also stamps checkpoint format 2: older readers refuse it by name
    config.dtype = next(t for t in tensors.values() if t.is_floating_point()).dtype
    config.save_pretrained(folder)
    save_file(tensors, str(folder / WEIGHTS_NAME), metadata={"format": "pt"})
    return errors


class RelativeDrafterOnOtherBase(DrafterTargetMismatch):
    """A target-relative drafter was asked to load on a target whose base model or weights are not the ones its
    differences were taken from: rebuilt there it would be another drafter. `differences` as DrafterTargetMismatch."""

    def __init__(self, differences: list, drafter_name: str) -> None:
        self.differences = list(differences)
        lines = "\n  - ".join(d.describe() for d in self.differences)
        ValueError.__init__(
            self,
            f"'{drafter_name}' is stored relative to its base model's weights (each layer kept as a difference from "
            f"them), and this target is not that base:\n  - {lines}\nRebuilt on this target's weights it would be "
            "another drafter than the one trained and published (allow_base_model_mismatch=True does not rebuild "
            "one). Fix: load it with the model it was made from; or pass rebuild_on_mismatched_base=True to rebuild "
            "it on this target's weights anyway (the output stays lossless; how many drafts are accepted there is "
            "untested).",
        )


def _check_base(drafter: Any, target: PreTrainedModel, name: str, rebuild_on_mismatched_base: bool) -> None:
    """The target check of a relative checkpoint, always with the weights checked: differences in shape or
    architecture raise DrafterTargetMismatch; in the base model or its weights RelativeDrafterOnOtherBase, unless
    `rebuild_on_mismatched_base`, which warns that the drafter is rebuilt on other weights."""
    try:
        drafter.check_target(target)
    except DrafterTargetMismatch as err:
        base_only = bool(err.differences) and all(d.field in BASE_FIELDS for d in err.differences)
        if not base_only:
            raise
        if not rebuild_on_mismatched_base:
            raise RelativeDrafterOnOtherBase(err.differences, name) from None
        target_name = getattr(target, "name_or_path", None) or type(target).__name__
        warnings.warn(
            f"'{name}' was rebuilt on other weights: its differences were taken from "
            f"{drafter.config.base_model_name_or_path or 'its base model'}, and were added to the weights of "
            f"'{target_name}' (rebuild_on_mismatched_base=True). This is another drafter than the one published; "
            "the output stays lossless, its acceptance there is untested.",
            RebuiltOnOtherWeights,
            stacklevel=4,
        )


class RebuiltOnOtherWeights(UserWarning):
    """Warned when a target-relative drafter is rebuilt on a target that is not its base model
    (`rebuild_on_mismatched_base=True`)."""


def load_target_relative(cls: type, directory: Path, target: PreTrainedModel,
                         rebuild_on_mismatched_base: bool = False, name: str | None = None) -> Any:
    """An unbound drafter of class `cls` rebuilt from the target-relative checkpoint in `directory`.

    The target is checked first, weights included: the stored differences are only meaningful against the
    weights they were taken from. Another base model or other weights are refused (RelativeDrafterOnOtherBase)
    unless `rebuild_on_mismatched_base`, which rebuilds on the target's weights with a RebuiltOnOtherWeights
    warning; `name` is how messages call the drafter (default: the directory).
    """
    from safetensors.torch import load_file

    config = cls.config_class.from_pretrained(directory)
    RelativeStorage.from_config(config)  # a storage this reader does not know is refused, not guessed at
    drafter = cls(config)
    drafter.name_or_path = str(directory)
    _check_base(drafter, target, name or str(directory), rebuild_on_mismatched_base)
    dtype = getattr(torch, str(getattr(config, "dtype", None) or "float32").replace("torch.", ""))
    tensors = load_file(str(directory / WEIGHTS_NAME))
    drafter.load_state_dict(absolute_state(tensors, drafter, target, dtype))
    # the config describes the drafter in memory, whose weights are whole now: save_pretrained writes them so
    drafter.config.weights_storage = None
    return drafter.to(dtype).eval()


def stored_size(drafter: Any, storage: RelativeStorage, dtype: torch.dtype | None = None) -> int:
    """Bytes of the tensors a target-relative checkpoint of `drafter` holds (as relative_state would write)."""
    dtype = dtype or next(drafter.parameters()).dtype
    width = torch.empty((), dtype=dtype).element_size()
    total = 0
    for key, value in drafter.state_dict().items():
        shape, kind = value.shape, stored_as(key, value, storage)
        if not value.is_floating_point():
            total += value.numel() * value.element_size()
        elif kind == "difference":
            total += storage.layer_rank * (shape[0] + shape[1]) * width
        elif kind == "fuse":
            total += (shape[0] * (shape[1] - shape[0]) + storage.token_rank * 2 * shape[0]) * width
        else:
            total += value.numel() * width
    return total
