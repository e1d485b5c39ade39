"""oneiro-hf: lossless speculative decoding for transformers with latent drafters (OneiroDraft).

    drafter = OneiroDrafter.from_pretrained(path, target=model)
    out = model.generate(**inputs, assistant_model=drafter)

The rooms, top to bottom (a room imports only from rooms below it; docs/design.md has the map):

    modeling_oneiro, loading    the drafter model and its entry points; loading a target with its drafter
    generation/                 what `generate` calls: the hook, the chain generator, the tree/batch loop, sessions
    drafting/                   what proposes drafts: lookup, memory, the latent drafter's trees, the cost model
    kernels/                    the CPU kernels a target runs on (exact attention, prepacked and 16-bit linears)
    storage/                    checkpoints, identity of base weights, target-relative files, cards, the Hub
    settings, targets, chat,    what every room may read: the drafting settings, what a target is, prompts as
    configuration_oneiro, ...   token ids, the drafter config, the supported transformers range, extras
    training/, bench/, serving/ tools built on the rooms above: oneiro-train, oneiro-bench, vLLM
"""

from transformers import AutoConfig, AutoModel

from . import moved
from .compat import UnsupportedTransformersVersion, check_transformers_version
from .configuration_oneiro import OneiroDrafterConfig
from .drafting.stats import DraftStats
from .generation.inputs import UnsupportedGenerateCall
from .kernels.cpu import Kernels, cpu_kernels, release_cpu_kernels
from .modeling_oneiro import DrafterBusy, OneiroDrafter
from .targets import DrafterTargetMismatch, UnsupportedTarget
from .version import __version__ as __version__

moved.install()
AutoConfig.register(OneiroDrafterConfig.model_type, OneiroDrafterConfig, exist_ok=True)
AutoModel.register(OneiroDrafterConfig, OneiroDrafter, exist_ok=True)

__all__ = [
    "DraftStats",
    "DrafterBusy",
    "DrafterTargetMismatch",
    "Kernels",
    "OneiroDrafter",
    "OneiroDrafterConfig",
    "UnsupportedGenerateCall",
    "UnsupportedTarget",
    "UnsupportedTransformersVersion",
    "check_transformers_version",
    "cpu_kernels",
    "release_cpu_kernels",
]
