"""`oneiro-train campaign`: deadlines, milestones, resuming, the batch probe, and a whole run on SmolLM2."""

from __future__ import annotations

import dataclasses
import datetime
import json
import subprocess
import sys
from pathlib import Path

import pytest

from oneiro_hf.training import campaign
from oneiro_hf.training.campaign import CampaignArguments, CampaignError, parse_deadline

ROOT = Path(__file__).resolve().parent.parent


def test_deadlines_in_each_form() -> None:
    now = datetime.datetime(2026, 12, 4, 15, 0, tzinfo=datetime.timezone.utc).timestamp()
    assert parse_deadline("+90m", now) == now + 5400 and parse_deadline("+2h", now) == now + 7200
    assert parse_deadline("18:20", now) == now + 3 * 3600 + 20 * 60
    assert parse_deadline("14:00", now) == now + 23 * 3600  # passed today: tomorrow's
    assert parse_deadline(str(now + 5), now) == now + 5
    with pytest.raises(CampaignError, match="Fix: pass HH:MM"):
        parse_deadline("soon", now)


def test_milestones_follow_the_curve_and_stop_at_the_goal() -> None:
    args = CampaignArguments(target="t", dataset="d", until="+1h", goal_tokens=500, milestone_tokens=200)
    assert campaign.next_milestone(0, args, []) == 200
    assert campaign.next_milestone(350, args, [{"milestone": 200}]) == 400
    assert campaign.next_milestone(450, args, [{"milestone": 200}, {"milestone": 400}]) == 500
    # data only (no --recipe): past what the dataset holds; with a recipe, the first milestone not trained on
    assert campaign.next_milestone(410, args, [{"milestone": 200}]) == 500
    trained = CampaignArguments(target="t", dataset="d", until="+1h", goal_tokens=500, milestone_tokens=200, recipe="r")
    assert campaign.next_milestone(410, trained, [{"milestone": 200}]) == 400
    assert campaign.next_milestone(450, trained, []) == 400  # the data outgrew 200 untrained: train on what is there
    assert campaign.next_milestone(900, trained, [{"milestone": 200}]) == 500


def test_a_milestone_counts_the_recipes_training_split(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from oneiro_hf.training.features import is_eval_record

    recipe = tmp_path / "r.json"
    recipe.write_text(json.dumps({"eval_fraction": 0.4, "split_seed": 3}))
    args = CampaignArguments(target="t", dataset=str(tmp_path / "ds"), until="+1h", recipe=str(recipe))
    split = campaign.training_split(args)
    assert split == campaign.TrainingSplit(0.4, 3)
    recipe.write_text(json.dumps({}))  # unset: oneiro-train's own defaults
    assert campaign.training_split(args) == campaign.TrainingSplit(0.05, 0)
    assert campaign.training_split(dataclasses.replace(args, recipe=None)) == campaign.TrainingSplit(0.0, 0)

    ids = [f"r{i}" for i in range(40)]
    lengths = [i + 1 for i in range(40)]
    held = [is_eval_record(i, 0.4, 3) for i in ids]
    assert any(held) and not all(held)
    (tmp_path / "ds" / "data").mkdir(parents=True)
    pq.write_table(pa.table({"id": ids, "output_ids": [[7] * n for n in lengths]}),
                   tmp_path / "ds" / "data" / "train-0.parquet")
    assert campaign.dataset_tokens(args.dataset) == sum(lengths)
    assert campaign.dataset_tokens(args.dataset, split) == sum(n for n, h in zip(lengths, held) if not h)
    assert campaign.dataset_tokens(tmp_path / "missing", split) == 0


def test_recipe_flags_and_refused_recipes(tmp_path: Path) -> None:
    recipe = tmp_path / "r.json"
    recipe.write_text(json.dumps({"max_steps": 2, "ridge_init": False, "lr_scheduler_kwargs": {"min_lr_rate": 0.3}}))
    assert campaign.recipe_flags(str(recipe)) == [
        "--max_steps", "2", "--ridge_init", "false", "--lr_scheduler_kwargs", '{"min_lr_rate": 0.3}']
    recipe.write_text(json.dumps({"output_dir": "x"}))
    with pytest.raises(CampaignError, match="which the campaign sets. Fix: remove it"):
        campaign.recipe_flags(str(recipe))
    with pytest.raises(CampaignError, match="Fix: pass a JSON object"):
        campaign.recipe_flags(str(tmp_path / "missing.json"))


def test_an_unusable_batch_size_names_the_fix(tmp_path: Path) -> None:
    args = CampaignArguments(target="t", dataset="d", until="+1h", batch_size="many")
    with pytest.raises(CampaignError, match="pass a number or 'auto'"):
        campaign._batch_size(args, None, tmp_path, None)


@pytest.fixture(scope="module")
def smollm2():
    import torch

    from oneiro_hf.storage.reference_models import load_reference_model

    torch.set_num_threads(1)
    return load_reference_model("smollm2-135m-instruct")


def test_the_batch_probe_measures_every_batch_size(smollm2) -> None:
    from oneiro_hf.training.selfdistill import measure_batch_throughput

    probe = measure_batch_throughput(smollm2[0], (1, 3), prompt_tokens=8, new_tokens=2)
    assert set(probe["decode_tokens_per_s"]) == {1, 3} and all(v > 0 for v in probe["decode_tokens_per_s"].values())
    assert probe["dtype"] == "float32" and probe["new_tokens"] == 2


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


@pytest.mark.slow
def test_a_campaign_grows_the_data_trains_at_milestones_commits_and_resumes(tmp_path, monkeypatch, smollm2) -> None:
    from oneiro_hf.training.records import load_records

    monkeypatch.chdir(tmp_path)
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "config", "user.email", "t@example.invalid")
    _git(tmp_path, "config", "user.name", "t")
    Path("recipe.json").write_text(json.dumps({
        "interval": "28,30", "draft_vocab_size": 256, "max_seq_len": 96, "max_steps": 2, "ridge_init": False,
        "per_device_train_batch_size": 2, "eval_fraction": 0.3, "save_strategy": "no", "report_to": "none",
        "feature_batch_tokens": 512, "eval_rollout_steps": 2, "disable_tqdm": True, "use_cpu": True}))
    argv = ["--target", "smollm2-135m-instruct", "--dataset", "data/ds", "--until", "+24h", "--recipe", "recipe.json",
            "--sources", "synthetic", "--num_prompts", "12", "--max_new_tokens", "8", "--batch_size", "3",
            "--dtype", "float32", "--device", "cpu", "--threads", "1", "--milestone_tokens", "20",
            "--goal_tokens", "40", "--checkpoint_out", "data/drafter",
            "--on_milestone", f"{sys.executable} {ROOT / 'scripts' / 'campaign_commit.py'}"]
    assert campaign.main(argv) == 0
    records = load_records("data/ds")
    tokens = sum(len(r["output_ids"]) for r in records)
    assert tokens >= 40 and len({r["id"] for r in records}) == len(records)
    curve = json.loads(Path("data/ds/learning_curve.json").read_text())["points"]
    assert [p["milestone"] for p in curve] == [20, 40]
    assert all(p["eval_tau"] >= 1.0 for p in curve)
    # a milestone counts the answer tokens its drafter trains on: the 30% the recipe holds out are not among them
    assert all(p["train_response_tokens"] >= p["milestone"] for p in curve)
    assert {p["feature_dtype"] for p in curve} == {"float32"}  # the recipe computes features on the fly
    assert json.loads(Path("data/drafter/training_summary.json").read_text())["records"] == curve[-1]["records"]
    export = json.loads(Path("data/ds/export.json").read_text())
    assert export["throughput"]["response_tokens"] >= tokens and export["parts"][0]["dtype"] == "float32"
    log = _git(tmp_path, "log", "--format=%s")
    assert "Campaign milestone 40: held-out tau" in log and "Campaign data:" in log
    assert _git(tmp_path, "status", "--porcelain", "data") == ""
    # the goal is met: running again answers nothing more and trains nothing
    answered = Path("runs/campaign/answers.jsonl").read_text()
    monkeypatch.setattr(campaign, "train_milestone", lambda *a: pytest.fail("the goal was already trained on"))
    assert campaign.main(argv) == 0 and Path("runs/campaign/answers.jsonl").read_text() == answered
    # a fresh machine (no work dir) with a higher goal goes on from the committed dataset without repeating a prompt
    before = {r["id"] for r in records}
    fresh = argv[: argv.index("--on_milestone")]
    fresh = [a for a in fresh if a not in ("--recipe", "recipe.json")]
    goal = tokens + 16  # every record counts without a recipe: the held-out ones are not left to answer again
    fresh[fresh.index("--goal_tokens") + 1] = str(goal)
    assert campaign.main([*fresh, "--work_dir", "runs/other"]) == 0
    new = {json.loads(line)["id"] for line in Path("runs/other/answers.jsonl").read_text().splitlines()}
    grown = load_records("data/ds")
    assert new and not new & before and len(grown) == len(records) + len(new)
    assert sum(len(r["output_ids"]) for r in grown) >= goal


def test_a_campaign_captures_features_the_training_then_finds_cached(tmp_path, monkeypatch, smollm2) -> None:
    """--feature_cache_dir: the answering bfloat16 copy stores each answer's features; a float32 target training
    with --feature_dtype bfloat16 on that cache computes none of them again, and finds them close to its own."""
    import torch

    from oneiro_hf.training import feature_store as store
    from oneiro_hf.training import features as feat
    from oneiro_hf.training.records import load_records

    monkeypatch.chdir(tmp_path)
    argv = ["--target", "smollm2-135m-instruct", "--dataset", "data/ds", "--until", "+24h", "--sources", "synthetic",
            "--num_prompts", "6", "--max_new_tokens", "8", "--batch_size", "3", "--dtype", "bfloat16", "--device",
            "cpu", "--threads", "1", "--milestone_tokens", "30", "--goal_tokens", "30", "--feature_cache_dir",
            "features", "--max_seq_len", "96"]
    assert campaign.main(argv) == 0
    records = load_records("data/ds")
    target = smollm2[0]  # float32, as oneiro-train loads it
    cache = store.FeatureCache("features", target, 96, compute_dtype=torch.bfloat16)
    usable = [r for r in records if feat.make_sequence(r, 96) is not None]
    assert usable and cache.build(records, progress=False)["computed"] == 0
    fresh = store.FeatureCache("pass", target, 96, compute_dtype=torch.bfloat16)
    fresh.build(records, progress=False)
    for rec in usable:
        a, b = cache.get(cache.lookup(rec)), fresh.get(fresh.lookup(rec))
        assert torch.equal(a["input_ids"], b["input_ids"])
        cos = torch.nn.functional.cosine_similarity(a["states"].float(), b["states"].float(), dim=-1)
        assert cos.min() > 0.995 and cos.mean() > 0.999  # bfloat16 weights against bfloat16 autocast
        labelled = b["target_argmax"] >= 0
        # the captured labels are the bfloat16 copy's greedy answer; the pass's come from the float32 head
        assert (a["target_argmax"][labelled] == b["target_argmax"][labelled]).float().mean() > 0.8


def test_captured_features_must_be_what_the_recipe_trains_on(tmp_path: Path) -> None:
    recipe = tmp_path / "recipe.json"
    recipe.write_text(json.dumps({"feature_cache_dir": "runs/f", "feature_dtype": "bfloat16", "max_seq_len": 1024}))
    base = {"target": "t", "dataset": "d", "until": "+1h", "recipe": str(recipe), "max_seq_len": 1024}
    campaign.check_capture(campaign.CampaignArguments(**base, feature_cache_dir="runs/f/"))
    for wrong in ({"feature_cache_dir": "runs/g"}, {"feature_cache_dir": "runs/f", "dtype": "float32"},
                  {"feature_cache_dir": "runs/f", "max_seq_len": 512}):
        with pytest.raises(campaign.CampaignError, match="Fix: set those in the recipe"):
            campaign.check_capture(campaign.CampaignArguments(**{**base, **wrong}))


def test_probe_only_measures_writes_and_exits(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(campaign, "PROBED_BATCH_SIZES", (1, 2))
    argv = ["--target", "smollm2-135m-instruct", "--dataset", str(tmp_path / "ds"), "--until", "+5m", "--dtype",
            "float32", "--device", "cpu", "--threads", "1", "--work_dir", str(tmp_path / "w"), "--probe_only"]
    assert campaign.main(argv) == 0
    stored = json.loads((tmp_path / "w" / "batch_throughput.json").read_text())
    (probe,) = stored.values()
    assert set(probe["decode_tokens_per_s"]) == {"1", "2"} and json.loads(capsys.readouterr().out) == stored
    assert not (tmp_path / "ds").exists() and not (tmp_path / "w" / "answers.jsonl").exists()


def test_a_milestone_training_cut_by_the_deadline_is_paused_then_resumed(tmp_path: Path, monkeypatch) -> None:
    """The training's time box spans sessions: cut at the deadline it is not a curve point; the next run resumes it."""
    recipe = tmp_path / "r.json"
    recipe.write_text(json.dumps({"max_steps": 4000}))
    args = CampaignArguments(target="t", dataset="d", until="+1h", recipe=str(recipe), train_minutes=120.0)
    out = tmp_path / "train-200"
    runs: list[list[str]] = []

    def fake_train(cmd, check):
        argv = cmd[3:]
        runs.append(argv)
        finished = len(runs) == 2
        out.mkdir(exist_ok=True)
        evals = [{"label": "final", "eval_tau": 1.9, "eval_accept_1": 0.55}] if finished else []
        (out / "training_summary.json").write_text(json.dumps({
            "finished": finished, "evals": evals, "train_response_tokens": 200, "records": 3, "sources": {},
            "global_step": 7, "epochs": 1.5, "trained_minutes": 120.0 if finished else 50.0, "timings": "",
            "hardware": "", "date": ""}))
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(campaign.subprocess, "run", fake_train)
    assert campaign.train_milestone(args, tmp_path, 200, until=1234.0) is None
    flags = dict(zip(runs[0][::2], runs[0][1::2]))
    assert flags["--max_train_minutes"] == "120.0" and flags["--train_until"] == "1234"
    assert flags["--resume_from_checkpoint"] == "auto"
    point = campaign.train_milestone(args, tmp_path, 200, until=99999.0)  # the next session
    assert len(runs) == 2 and point["eval_tau"] == 1.9 and point["epochs"] == 1.5
    assert campaign.train_milestone(args, tmp_path, 200, until=99999.0) == point and len(runs) == 2  # done: no rerun
    # a finished training under its milestone (held-out records once counted toward it) is kept aside and redone
    summary = json.loads((out / "training_summary.json").read_text())
    (out / "training_summary.json").write_text(json.dumps({**summary, "train_response_tokens": 150}))
    campaign.train_milestone(args, tmp_path, 200, until=99999.0)
    assert len(runs) == 3 and json.loads((tmp_path / "train-200-150" / "training_summary.json").read_text())[
        "train_response_tokens"] == 150


def test_a_paused_milestone_moves_to_another_machine_in_the_committed_checkpoint(tmp_path: Path, monkeypatch) -> None:
    """--train_epochs: the steps bound the milestone; the paused training's last checkpoint is kept in
    <checkpoint_out>/paused, from which a machine without the work dir resumes; the finished drafter replaces it."""
    import torch

    recipe = tmp_path / "r.json"
    recipe.write_text(json.dumps({"max_steps": 4000}))
    kept = tmp_path / "drafters" / "campaign"
    args = CampaignArguments(target="t", dataset="d", until="+1h", recipe=str(recipe), train_epochs=1.0,
                             checkpoint_out=str(kept))
    runs: list[tuple[Path, list[str], list[str]]] = []

    def fake_train(cmd, check):
        argv = cmd[3:]
        out = Path(argv[argv.index("--output_dir") + 1])
        runs.append((out, argv, sorted(p.name for p in out.glob("checkpoint-*/*")) if out.is_dir() else []))
        finished = len(runs) == 3
        out.mkdir(parents=True, exist_ok=True)
        step = 10 * len(runs)
        ckpt = out / f"checkpoint-{step}"
        ckpt.mkdir()
        for name in ("model.safetensors", "trainer_state.json", "rng_state.pth"):
            (ckpt / name).write_text(f"{name} at {step}")
        torch.save({"state": {0: {"step": torch.tensor(float(step)), "exp_avg": torch.full((3,), step + 0.1)}},
                    "param_groups": [{"lr": 1e-3, "params": [0]}]}, ckpt / "optimizer.pt")
        (out / "model.safetensors").write_text("final") if finished else None
        (out / "training_summary.json").write_text(json.dumps({
            "finished": finished, "evals": [{"eval_tau": 2.1}] if finished else [], "train_response_tokens": 9,
            "records": 3, "sources": {}, "global_step": step, "epochs": 0.5 * len(runs), "trained_minutes": 50.0,
            "timings": "", "hardware": "cpu", "date": ""}))
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(campaign.subprocess, "run", fake_train)
    assert campaign.train_milestone(args, tmp_path / "machine-a", 1000, until=1234.0) is None
    flags = dict(zip(runs[0][1][::2], runs[0][1][1::2]))
    assert flags["--max_steps"] == "-1" and flags["--num_train_epochs"] == "1.0"
    assert flags["--max_train_minutes"] == "inf" and flags["--train_until"] == "1234"
    last = len(runs[0][1]) - 1 - runs[0][1][::-1].index("--max_steps")
    assert runs[0][1].index("4000") < last  # after the recipe's, so it wins
    from oneiro_hf.training.cli import parse_args

    parsed = parse_args(["--target", "t", "--data", "d", "--output_dir", str(tmp_path / "o"), "--max_steps", "4000",
                         "--max_steps", "-1", "--num_train_epochs", "1.0", "--max_train_minutes", "inf"])[2]
    assert parsed.max_steps == -1 and parsed.max_train_minutes == float("inf")
    paused = kept / "paused"
    assert sorted(p.name for p in paused.iterdir()) == ["model.safetensors", "optimizer.pt", "paused.json",
                                                         "trainer_state.json"]  # no machine-bound rng state
    assert json.loads((paused / "paused.json").read_text())["checkpoint"] == "checkpoint-10"

    # another machine: no work dir; the kept checkpoint is put where --resume_from_checkpoint auto finds it
    assert campaign.train_milestone(args, tmp_path / "machine-b", 1000, until=2000.0) is None
    assert runs[1][2] == ["model.safetensors", "optimizer.pt", "trainer_state.json"]
    restored = torch.load(tmp_path / "machine-b" / "train-1000" / "checkpoint-10" / "optimizer.pt")
    assert restored["state"][0]["step"].item() == 10.0 and restored["state"][0]["step"].dtype == torch.float32
    moment = restored["state"][0]["exp_avg"]  # kept in bfloat16, committed at half the size
    assert moment.dtype == torch.bfloat16 and torch.equal(moment, torch.full((3,), 10.1).bfloat16())
    param = torch.nn.Parameter(torch.zeros(3))
    optimizer = torch.optim.AdamW([param])
    optimizer.load_state_dict(restored)
    assert optimizer.state[param]["exp_avg"].dtype == torch.float32  # the resume computes in float32 again
    assert json.loads((paused / "paused.json").read_text())["checkpoint"] == "checkpoint-20"
    # another milestone's paused training is not resumed by this one
    other = tmp_path / "machine-c" / "train-2000"
    campaign.restore_paused(args, other, 2000)
    assert not other.exists()

    point = campaign.train_milestone(args, tmp_path / "machine-b", 1000, until=3000.0)
    assert point["eval_tau"] == 2.1 and runs[2][2][:1] == ["model.safetensors"]  # machine-b's own checkpoints
    campaign.keep_checkpoint(point, args.checkpoint_out)
    assert not paused.exists() and (kept / "model.safetensors").read_text() == "final"


def test_a_training_killed_midway_keeps_its_last_checkpoint(tmp_path: Path, monkeypatch) -> None:
    """The kernel kills a training that runs out of memory before it can pause: its last checkpoint is kept as the
    paused one all the same (and handed to --on_milestone), and the error says how it ended and where the work is."""
    recipe = tmp_path / "r.json"
    recipe.write_text(json.dumps({"max_steps": 4000}))
    kept = tmp_path / "drafters" / "campaign"
    args = CampaignArguments(target="t", dataset="d", until="+1h", recipe=str(recipe), train_epochs=1.0,
                             checkpoint_out=str(kept))

    def killed(cmd, check):
        out = Path(cmd[cmd.index("--output_dir") + 1])
        for step in (450, 500):
            ckpt = out / f"checkpoint-{step}"
            ckpt.mkdir(parents=True)
            (ckpt / "model.safetensors").write_text(f"weights at {step}")
            (ckpt / "trainer_state.json").write_text(json.dumps({"global_step": step, "epoch": step / 824}))
            (ckpt / "oneiro_training.json").write_text(json.dumps({"trained_seconds": 15.0 * step}))
        return subprocess.CompletedProcess(cmd, -9)

    monkeypatch.setattr(campaign.subprocess, "run", killed)
    with pytest.raises(CampaignError, match=r"killed by signal 9, as the kernel kills for want of memory.*"
                                            r"checkpoint-500, is kept in .*paused; the same command resumes it"):
        campaign.train_milestone(args, tmp_path / "work", 1000, until=1234.0)
    info = json.loads((kept / "paused" / "paused.json").read_text())
    assert info["checkpoint"] == "checkpoint-500" and info["global_step"] == 500 and info["trained_minutes"] == 125.0
    assert (kept / "paused" / "model.safetensors").read_text() == "weights at 500"
    # another machine resumes from it, and a second failure keeps what it has again
    monkeypatch.setattr(campaign.subprocess, "run", lambda cmd, check: subprocess.CompletedProcess(cmd, 3))
    with pytest.raises(CampaignError, match=r"failed \(exit status 3; see above\)\. Its last checkpoint, "
                                            r"checkpoint-500"):
        campaign.train_milestone(args, tmp_path / "other", 1000, until=1234.0)
    # with nowhere to keep it (no --checkpoint_out) the error still says how the process ended
    bare = dataclasses.replace(args, checkpoint_out=None)
    with pytest.raises(CampaignError, match=r"failed \(exit status 3; see above\)\. Its log"):
        campaign.train_milestone(bare, tmp_path / "third", 1000, until=1234.0)


def test_on_milestone_runs_the_command_on_the_paths_and_a_failure_stops_with_the_reason(tmp_path, monkeypatch) -> None:
    """The library runs no git itself: --on_milestone's command gets the message and the paths; the deprecated
    --commit is the repository's commit script, refused with the fix outside a checkout."""
    monkeypatch.chdir(tmp_path)
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "config", "user.email", "t@example.invalid")
    _git(tmp_path, "config", "user.name", "t")
    Path("data").mkdir()
    Path("data/a.txt").write_text("answers")
    script = f"{sys.executable} {ROOT / 'scripts' / 'campaign_commit.py'}"
    args = CampaignArguments(target="t", dataset="data", until="+1h", on_milestone=script)
    campaign.on_milestone(args, ["data"], "Campaign data: 7 training tokens of t")
    assert _git(tmp_path, "log", "--format=%s").strip() == "Campaign data: 7 training tokens of t"
    campaign.on_milestone(args, ["data"], "nothing changed")  # nothing to commit is fine
    assert _git(tmp_path, "log", "--format=%s").count("\n") == 1
    failing = dataclasses.replace(args, on_milestone=f"{sys.executable} -c 'import sys; sys.exit(5)'")
    with pytest.raises(CampaignError, match=r"failed \(exit 5\).*Fix: run it by hand"):
        campaign.on_milestone(failing, ["data"], "m")
    with pytest.raises(CampaignError, match="has none. Fix: run from the checkout, or pass --on_milestone"):
        campaign.milestone_command(dataclasses.replace(args, on_milestone=None, commit=True))
    with pytest.raises(CampaignError, match="both name what runs"):
        campaign.milestone_command(dataclasses.replace(args, commit=True))
