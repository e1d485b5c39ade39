"""`oneiro-export vllm` without vLLM: the folder's config and tensors carry the drafter's function exactly, drafters
vLLM cannot run are refused with their reason, and nothing in the package imports vLLM but the plugin modules."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from tiny import make_model
from transformers import Qwen2Config, Qwen2ForCausalLM

from oneiro_hf import OneiroDrafter
from oneiro_hf.serving import cli
from oneiro_hf.serving.vllm_export import (
    VLLM_ARCHITECTURE,
    VLLM_CONFIG_KEY,
    VllmExportRefused,
    export_for_vllm,
    target_mismatch,
    vllm_config,
    vllm_refusal,
)
from oneiro_hf.serving.vllm_plugin import SUPPORTED_VLLM, vllm_version_problem

PACKAGE = Path(__file__).resolve().parent.parent / "oneiro_hf"
PLUGIN_MODULES = {"oneiro_hf.serving.vllm_plugin", "oneiro_hf.serving.vllm_model"}


def _full_attention_qwen2():
    """A tiny Qwen2 without sliding windows (as Qwen2.5 checkpoints ship; tiny.py's slide in the upper layers)."""
    config = Qwen2Config(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, use_sliding_window=False)
    torch.manual_seed(0)
    return Qwen2ForCausalLM(config).eval()


def _saved(tmp_path: Path, arch: str = "llama", **drafter_kwargs) -> tuple[Path, Path, OneiroDrafter]:
    target = _full_attention_qwen2() if arch == "qwen2" else make_model(arch)
    target.save_pretrained(tmp_path / "target")
    drafter = OneiroDrafter.from_target(target, **drafter_kwargs)
    with torch.no_grad():  # a trained-looking fusion: every block non-trivial
        drafter.fuse.weight.copy_(torch.randn_like(drafter.fuse.weight) * 0.05)
        drafter.fuse.bias.copy_(torch.randn_like(drafter.fuse.bias) * 0.05)
    drafter.save_pretrained(tmp_path / "drafter")
    return tmp_path / "target", tmp_path / "drafter", drafter


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_the_folder_holds_the_drafters_function(tmp_path, arch):
    ids = [5, 3, 17, 90, 64, 2]
    target_dir, drafter_dir, drafter = _saved(tmp_path, arch, interval=(2, 4), input_layers=(3, 1, -1),
                                              draft_vocab_ids=ids)
    out = export_for_vllm(drafter_dir, tmp_path / "out", str(target_dir), num_speculative_tokens=4)
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == [VLLM_ARCHITECTURE] and config["model_type"] == arch
    assert config["num_hidden_layers"] == 2 and config["draft_vocab_size"] == len(ids)
    # vLLM returns the target's states in ascending layer order; the fusion's slot order is kept beside them
    assert config["eagle_aux_hidden_state_layer_ids"] == [1, 3, 4]
    assert config[VLLM_CONFIG_KEY]["input_layers"] == [3, 1, 4]
    assert config[VLLM_CONFIG_KEY]["interval"] == [2, 4] and config[VLLM_CONFIG_KEY]["num_target_layers"] == 4
    if "layer_types" in config:
        assert len(config["layer_types"]) == 2
    tensors = load_file(str(out / "model.safetensors"))
    for name, value in drafter.layers.state_dict().items():
        assert torch.equal(tensors[f"layers.{name}"].float(), value.float()), name
    assert torch.equal(tensors["fuse.weight"].float(), drafter.fuse.weight.float())
    assert torch.equal(tensors["fuse.bias"].float(), drafter.fuse.bias.float())
    target = drafter.target
    assert torch.equal(tensors["norm.weight"].float(), target.model.norm.weight.float())
    assert torch.equal(tensors["lm_head.weight"].float(), target.lm_head.weight[ids].float())
    assert tensors["draft_vocab_ids"].tolist() == ids
    readme = (out / "README.md").read_text()
    assert '"method": "eagle3"' in readme and '"num_speculative_tokens": 4' in readme and "vllm serve" in readme


def test_drafters_vllm_cannot_run_are_refused_with_the_reason(tmp_path):
    _, drafter_dir, drafter = _saved(tmp_path / "exact", verified_context="exact")
    with pytest.raises(VllmExportRefused, match=r"exact verified context.*Fix:"):
        export_for_vllm(drafter_dir, tmp_path / "out", "unused")
    assert not (tmp_path / "out").exists()
    gemma = OneiroDrafter.from_target(make_model("gemma3")).config
    assert "gemma3_text" in vllm_refusal(gemma) and "Fix:" in vllm_refusal(gemma)
    assert "'mistral'" in vllm_refusal(OneiroDrafter.from_target(make_model("mistral")).config)
    windowed = OneiroDrafter.from_target(make_model("qwen2")).config  # tiny qwen2: its upper layers slide
    assert "sliding-window" in vllm_refusal(windowed)
    assert vllm_refusal(drafter.config.__class__(**{**drafter.config.to_dict(), "verified_context": "own"})) is None


def test_the_cli_refuses_a_non_empty_out_dir_and_names_the_fix(tmp_path, capsys):
    target_dir, drafter_dir, _ = _saved(tmp_path)
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "x").write_text("x")
    assert cli.main(["vllm", str(drafter_dir), str(tmp_path / "busy"), "--target", str(target_dir)]) == 2
    assert "not empty. Fix:" in capsys.readouterr().err
    assert cli.main(["vllm", str(drafter_dir), str(tmp_path / "new"), "--target", str(target_dir)]) == 0
    assert (tmp_path / "new" / "model.safetensors").is_file()


def test_a_quantized_targets_quantization_stays_out_of_the_draft_config(tmp_path):
    target = _full_attention_qwen2()
    target.config.quantization_config = {"quant_method": "fp8", "activation_scheme": "dynamic"}
    drafter = OneiroDrafter.from_target(target, interval=(2, 4))
    assert drafter.config.target_config["quantization_config"]["quant_method"] == "fp8"  # the leak's source
    config = vllm_config(drafter)
    # vLLM reads a draft config's quantization_config as the draft weights' own (get_draft_quant_config): the
    # folder's tensors are plain, so it must not be there; everything else of the target's config is
    assert "quantization_config" not in config and "compression_config" not in config
    assert config["hidden_size"] == 64 and config["model_type"] == "qwen2"


def test_a_drafter_served_with_another_target_is_named_with_the_fields_that_differ(tmp_path):
    target = _full_attention_qwen2()
    config = vllm_config(OneiroDrafter.from_target(target, interval=(2, 4)))
    info, served = config[VLLM_CONFIG_KEY], target.config.to_dict()
    assert target_mismatch(info, served) is None
    other = {**served, "hidden_size": 576, "num_hidden_layers": 30}
    reason = target_mismatch(info, other)
    assert "exported for another target" in reason and "hidden_size 576 (the drafter's target: 64)" in reason
    assert "num_hidden_layers 30 (the drafter's target: 4)" in reason and "Fix:" in reason
    assert "model_type 'llama'" in target_mismatch(info, {**served, "model_type": "llama"})


def test_the_plugin_refuses_a_vllm_outside_its_range_naming_both_versions():
    assert vllm_version_problem("0.32.0") is None and vllm_version_problem("0.32.1+cpu") is None
    for installed in ("0.34.0", "0.31.2", "1.0.0", "not-a-version"):
        problem = vllm_version_problem(installed)
        assert f"vllm {installed} is installed" in problem and SUPPORTED_VLLM in problem and "Fix:" in problem


def test_the_vllm_extra_names_the_range_the_plugin_checks():
    pyproject = (PACKAGE.parent / "pyproject.toml").read_text(encoding="utf-8")
    extra = next(line for line in pyproject.splitlines() if line.startswith("vllm = "))
    assert f'"vllm{SUPPORTED_VLLM}"' in extra  # an upper bound: the plugin reaches into vLLM's private classes


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.update(f".{node.module}.{alias.name}" for alias in node.names)
            found.add(f".{node.module}")
    return found


def test_only_the_plugin_modules_import_vllm_and_nothing_imports_them():
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        imports = _imports(path)
        if name not in PLUGIN_MODULES:
            assert not any(m == "vllm" or m.startswith("vllm.") for m in imports), name
        assert not any(m.endswith(("vllm_model", "vllm_plugin")) for m in imports), name
