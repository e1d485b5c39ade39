"""The model card `oneiro-train` writes next to a trained drafter (README.md), for every stage.

One builder, `training_card(info)`: the front matter, the usage block and the held-out acceptance table are
shared; stages 1/2 describe the self-distillation data and training settings, stage 3 the on-policy rounds.
`info` is the dict also saved as training_summary.json (see `pipeline.save_outputs`).
"""

from __future__ import annotations

from typing import Any


def _front_matter(base_model: str, title_suffix: str = "") -> list[str]:
    return [
        "---",
        "library_name: oneiro-hf",
        f"base_model: {base_model}",
        "tags: [speculative-decoding, oneiro-draft, drafter]",
        "---",
        "",
        f"# OneiroDraft drafter for {base_model}{title_suffix}",
    ]


def _usage(drafter_path: str) -> list[str]:
    return [
        "```python",
        "from oneiro_hf import OneiroDrafter",
        "",
        f'drafter = OneiroDrafter.from_pretrained("{drafter_path}", target=model)',
        "out = model.generate(**inputs, assistant_model=drafter)",
        "```",
    ]


def _nan(m: dict, key: str) -> float:
    return m.get(key, float("nan"))


def _held_out_table(evals: list[tuple[str, dict[str, float]]], steps: int) -> list[str]:
    lines = [
        "## Held-out acceptance (greedy, drafts rolled from true states)",
        "",
        f"tau = 1 + sum_j P(first j drafted tokens accepted), {steps}-token drafts.",
        "",
        "| checkpoint | " + " | ".join(f"agree@{k}" for k in range(1, steps + 1)) + " | tau |",
        "|---|" + "---|" * (steps + 1),
    ]
    for label, m in evals:
        cells = [f"{_nan(m, f'eval_agree_step{k}'):.3f}" for k in range(1, steps + 1)]
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {_nan(m, 'eval_tau'):.3f} |")
    return lines


def _offline_body(info: dict[str, Any]) -> list[str]:
    """Stages 1, 2, 1+2: trained on self-distillation data."""
    start, end = info["interval"]
    sources = ", ".join(f"{k} {v}" for k, v in sorted(info["sources"].items(), key=lambda kv: -kv[1]))
    return [
        (
            "A latent drafter for lossless speculative decoding with oneiro-hf: copies of the target's decoder "
            f"layers {start}..{end - 1} plus a learned input fusion, rolled forward "
            "in the target's own hidden-state space. The target's embedding, final norm and LM head are shared at "
            "run time and are not part of this checkpoint."
        ),
        "",
        "## Use",
        "",
        *_usage(info["output_dir"]),
        "",
        "## Training data (self-distillation: the target's own greedy answers)",
        "",
        f"- files: {', '.join(info['data_files'])}",
        f"- records: {info['records']} ({info['train_records']} train, {info['eval_records']} held out by id hash)",
        f"- response tokens used for training: {info['train_response_tokens']}",
        f"- sources: {sources}",
        "- Prompts come from the sources above only; keep evaluation sets (e.g. Spec-Bench) out of them.",
        "",
        "## Settings",
        "",
        (
            f"- interval {tuple(info['interval'])}, draft vocabulary {info['draft_vocab_size']} tokens "
            f"(covers {info['vocab_coverage']:.1%} of held-out response tokens)"
            + (f"; multi-layer input: target states {info['input_layers']}" if info.get("input_layers") else "")
        ),
        (
            f"- stage {info['stage']}: rollout steps K={info['rollout_steps']} weights "
            f"{info['rollout_step_weights']}; state loss {info['state_loss']} x{info['state_loss_weight']}, "
            f"token loss {info['token_loss']} x{info['token_loss_weight']}"
        ),
        f"- ridge initialisation of the fusion: {info['ridge']}",
        (
            f"- optimiser steps {info['global_step']}, batch {info['batch_size']}, lr {info['learning_rate']}, "
            f"max_seq_len {info['max_seq_len']}, weights saved as {info['save_dtype']}"
        ),
        f"- hardware: {info['hardware']}; wall-clock: {info['timings']}",
        "",
    ]


def _onpolicy_body(info: dict[str, Any]) -> list[str]:
    """Stage 3: refined on its own drafting rounds."""
    k = info["draft_tokens"]
    lines = [
        (f"Refined from `{info['init_drafter']}` by {info['rounds']} rounds of on-policy refinement: each round the "
         f"drafter drafted {k} latent tokens per step for the target (strict greedy) on "
         f"{info['prompts_per_round']} training prompts, and trained {info['steps_per_round']} steps on its own "
         f"drafting rounds from a {info['buffer_policy']} replay buffer of {info['buffer_size']} sequences (rejected "
         f"rounds' share of the loss {info['mix_ratio']}, error-step weight {info['error_weight']})."),
        "",
        *_usage(info["output_dir"]),
        "",
        f"Prompts: {info['prompts']}. Held-out records (by id hash) are never used as prompts.",
        "",
        "## Collection per round (the drafter before that round's training)",
        "",
        "| round | tau | " + " | ".join(f"acc@{j}" for j in range(1, k + 1)) + " | rejected rounds | train loss |",
        "|---|---|" + "---|" * k + "---|---|",
    ]
    for r, m in enumerate(info["round_logs"]):
        cells = [f"{_nan(m, f'collect_accept_pos{j}'):.3f}" for j in range(1, k + 1)]
        lines.append(f"| {r} | {m['collect_tau']:.3f} | " + " | ".join(cells)
                     + f" | {m['collect_rejected_share']:.2f} | {_nan(m, 'round_train_loss'):.4f} |")
    return [*lines, ""]


def training_card(info: dict[str, Any], evals: list[tuple[str, dict[str, float]]]) -> str:
    """README.md of a drafter saved by oneiro-train; `info` as in training_summary.json, `evals` the held-out
    acceptance as (label, metrics) pairs in the order they were measured."""
    onpolicy = info["stage"] == "3"
    lines = _front_matter(info["base_model"], " (stage 3: on-policy refinement)" if onpolicy else "")
    lines += ["", *(_onpolicy_body(info) if onpolicy else _offline_body(info))]
    lines += _held_out_table(evals, info["eval_steps"])
    if onpolicy:
        lines += ["", f"Wall-clock: {info['timings']}; hardware: {info['hardware']}."]
    else:
        lines += ["", f"Trained with oneiro-hf {info['oneiro_hf_version']} on {info['date']}."]
    return "\n".join(lines) + "\n"
