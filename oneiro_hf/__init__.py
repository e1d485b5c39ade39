"""oneiro-hf: lossless speculative decoding for transformers with latent drafters (OneiroDraft).

    drafter = OneiroDrafter.from_pretrained(path, target=model)
    out = model.generate(**inputs, assistant_model=drafter)
"""

from transformers import AutoConfig, AutoModel

from .compat import UnsupportedTransformersVersion, check_transformers_version
from .configuration_oneiro import OneiroDrafterConfig
from .cpu_kernels import Kernels, cpu_kernels, release_cpu_kernels
from .generate_inputs import UnsupportedGenerateCall
from .modeling_oneiro import DrafterBusy, OneiroDrafter
from .stats import DraftStats
from .targets import DrafterTargetMismatch, UnsupportedTarget
from .version import __version__ as __version__

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
