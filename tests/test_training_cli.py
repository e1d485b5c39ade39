"""`oneiro-train --help` leads with what the command does and an example, then the project's own flags by
group, and only then transformers' TrainingArguments; required flags say so and no flag shows two defaults."""

from __future__ import annotations

import re

import pytest

from oneiro_hf.training.cli import OWN_TRAINING_GROUP, TRAINING_ARGUMENTS_GROUP, build_parser


@pytest.fixture(scope="module")
def help_text() -> str:
    return build_parser().format_help()


def _flag_line(text: str, flag: str) -> str:
    """The help entry of `flag` (its first line and any continuation lines), as one line."""
    match = re.search(rf"^  {re.escape(flag)}[ ,].*?(?=^  -|^\S|\Z)", text, re.MULTILINE | re.DOTALL)
    assert match, f"{flag} is not in the help"
    return " ".join(match.group(0).split())


def test_help_leads_with_description_and_example(help_text):
    usage, rest = help_text.split("\n\n", 1)
    assert usage.startswith("usage: oneiro-train --target MODEL") and len(usage.splitlines()) <= 2
    assert rest.lstrip().startswith("``oneiro-train``: train a OneiroDrafter")
    assert rest.index("oneiro-train --target smollm2-135m-instruct --data") < rest.index("--target TARGET")


def test_project_flags_come_grouped_before_training_arguments(help_text):
    order = [help_text.index(f"\n{title}:") for title in ("target", "data", OWN_TRAINING_GROUP,
                                                          TRAINING_ARGUMENTS_GROUP)]
    assert order == sorted(order)
    trainer_section = help_text[order[3]:]
    own_section = help_text[order[2]:order[3]]
    for flag in ("--interval", "--draft_vocab_size", "--stage", "--init_drafter", "--onpolicy_rounds"):
        assert f"  {flag} " in own_section and f"  {flag} " not in trainer_section, flag
    for flag in ("--learning_rate", "--output_dir", "--num_train_epochs"):
        assert f"  {flag} " in trainer_section, flag
    assert "  --target " in help_text[order[0]:order[1]] and "  --data " in help_text[order[1]:order[2]]


def test_required_flags_are_marked_and_defaults_shown_once(help_text):
    target = _flag_line(help_text, "--target")
    assert "(required)" in target and "default" not in target
    threads = _flag_line(help_text, "--threads")
    assert threads.count("default") == 1, threads
    assert "(default: 0.05)" in _flag_line(help_text, "--eval_fraction")
    assert "(default: None)" not in help_text



@pytest.mark.parametrize("flags, bf16, use_cpu", [
    (["--bf16"], True, True), (["--bf16", "true"], True, True), (["--bf16=True"], True, True),
    (["--bf16", "false"], False, False), ([], False, False), (["--bf16", "--use_cpu", "false"], True, False),
])
def test_bf16_without_accelerator_trains_under_cpu_autocast(monkeypatch, tmp_path, flags, bf16, use_cpu):
    """--bf16 on a machine without accelerators switches use_cpu on (the Trainer refuses bf16 otherwise)."""
    from oneiro_hf.training import cli

    monkeypatch.setattr(cli, "_no_accelerator", lambda: True)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    argv = ["--target", "tiny", "--data", "d.jsonl", "--output_dir", str(tmp_path / "out"), "--report_to", "none"]
    if flags[-2:] == ["--use_cpu", "false"]:  # the user's explicit choice stands, and the Trainer's check says why
        with pytest.raises(ValueError, match="use_cpu"):
            cli.parse_args(argv + flags)
        return
    _, _, args = cli.parse_args(argv + flags)
    assert (args.bf16, args.use_cpu) == (bf16, use_cpu)


def test_bf16_with_an_accelerator_leaves_the_device_alone(monkeypatch, tmp_path):
    from oneiro_hf.training import cli

    monkeypatch.setattr(cli, "_no_accelerator", lambda: False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    seen = []
    parser = cli.build_parser()
    monkeypatch.setattr(parser, "parse_args_into_dataclasses", lambda args: seen.append(args))
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    cli.parse_args(["--target", "tiny", "--data", "d.jsonl", "--output_dir", str(tmp_path), "--bf16"])
    assert "--use_cpu" not in seen[0]
