"""Runs a planned benchmark: loads the models once, then every question with every method, interleaved.

Methods run interleaved per question (the order rotates from one question to the next), after a warm-up, so
their ratios hold on a noisy machine. Each finished question is appended to its method's answers file at
once, so an interrupted run keeps its work.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..chat import encode_prompt
from ..generation.candidate_generator import OneiroCandidateGenerator
from ..kernels.cpu import STOCK, cpu_kernels
from .answers import BenchInputError, read_answers, resume_conflicts, write_answers
from .methods import MethodSpec
from .plan import Plan
from .profile import cpu_model
from .report import make_plots, report_markdown, summarize

WARMUP_TOKENS = 8


class StepRecorder:
    """Logs, per target verification pass of transformers' own assisted decoding (the hf-* methods: prompt
    lookup, early exit, assistant model), the draft length and accepted drafts, and the time spent inside
    the generator (drafting and its bookkeeping).

    Wrapping is for transformers' generators only, whose internals we do not own: it reads just what the
    loop passes between them. OneiroDraft's generator is never wrapped; oneiro methods read the same log
    from the call's `DraftStats` (`drafter.last_stats`, see `generate_once`).
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.draft_lengths: list[int] = []
        self.accepted: list[int] = []
        self.draft_s = 0.0

    def install(self, model) -> None:
        original = model._get_candidate_generator  # the drafter's instance hook, or the class method

        def get_candidate_generator(*args, **kwargs):
            generator = original(*args, **kwargs)
            if not isinstance(generator, OneiroCandidateGenerator):  # ours records its own steps
                self._wrap(generator)
            return generator

        model._get_candidate_generator = get_candidate_generator

    def _wrap(self, generator) -> None:
        get_candidates, update = generator.get_candidates, generator.update_candidate_strategy
        pending = {"length": 0}

        def timed_get_candidates(input_ids, *args, **kwargs):
            start = time.perf_counter()
            out = get_candidates(input_ids, *args, **kwargs)
            self.draft_s += time.perf_counter() - start
            pending["length"] = int(out[0].shape[-1] - input_ids.shape[-1])
            return out

        def timed_update(input_ids, scores, num_matches, *args, **kwargs):
            start = time.perf_counter()
            result = update(input_ids, scores, num_matches, *args, **kwargs)
            self.draft_s += time.perf_counter() - start
            self.draft_lengths.append(pending["length"])
            self.accepted.append(int(num_matches))
            return result

        generator.get_candidates = timed_get_candidates
        generator.update_candidate_strategy = timed_update
        _one_generation_config(generator)


def _one_generation_config(generator) -> None:
    """transformers' assistant generators (hf-assistant, hf-early-exit) call the assistant's `generate` with a
    generation config and, beside it, `min_new_tokens`, `max_new_tokens` and the target's `use_cache`, which
    transformers 5.25 warns is deprecated: the call gets one config instead, a copy holding those values (the
    same settings `generate` would have merged into its own copy)."""
    prepare = getattr(generator, "_prepare_generation_args", None)
    if prepare is None:
        return

    def one_config(*args, **kwargs):
        generation_args = prepare(*args, **kwargs)
        if generation_args.get("generation_config") is None:
            return generation_args
        config = copy.copy(generation_args["generation_config"])
        for key in ("min_new_tokens", "max_new_tokens"):
            if key in generation_args:
                setattr(config, key, generation_args.pop(key))
        assistant_kwargs = getattr(generator, "assistant_kwargs", {})
        if "use_cache" in assistant_kwargs:
            config.use_cache = assistant_kwargs.pop("use_cache")
        generation_args["generation_config"] = config
        return generation_args

    generator._prepare_generation_args = one_config


@dataclass
class BenchContext:
    model: Any
    tokenizer: Any
    drafter: Any
    assistant: Any
    specs: dict[str, MethodSpec]
    recorder: StepRecorder
    policy_states: dict[str, Any] = field(default_factory=dict)
    memories: dict[str, Any] = field(default_factory=dict)  # method -> its drafter's suffix memory (oneiro-suffix)
    drafters: dict[str, Any] = field(default_factory=dict)  # --extra-drafter NAME -> drafter
    kernel_labels: dict[str, str] = field(default_factory=lambda: {STOCK: STOCK})  # MethodSpec.kernels -> label

    def drafter_for(self, spec: MethodSpec):
        return self.drafters[spec.drafter_name] if spec.drafter_name else self.drafter


_ONEIRO_STAT_KEYS = ("steps", "batch_passes", "latent_steps", "lookup_steps", "empty_steps", "extended_steps",
                     "draft_time_s", "verify_time_s", "drafted_by_source", "accepted_by_source", "tree_nodes", "tree_branch_ranks",
                     "tree_drafter_calls", "drafter_calls")


def generate_once(ctx: BenchContext, method: str, input_ids, max_new_tokens: int, attention_mask=None,
                  memory_key: str | None = None) -> dict:
    """One timed generate call with `method`: new token ids ("tokens": the first row's; "rows": every row's, for
    a (B, T) left-padded batch with its `attention_mask`), seconds, and the per-step draft log.

    The drafter's suffix memory is the one kept under `memory_key` (default: the method's), so lanes that answer
    the same prompts (a throughput run's batched and separate calls) never draft from each other's answers."""
    import torch

    spec = ctx.specs[method]
    model = ctx.model
    mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask
    kwargs: dict[str, Any] = {"max_new_tokens": max_new_tokens, "do_sample": False, "attention_mask": mask}
    if model.generation_config.pad_token_id is None:
        pad = ctx.tokenizer.pad_token_id if ctx.tokenizer.pad_token_id is not None else ctx.tokenizer.eos_token_id
        if pad is not None:
            kwargs["pad_token_id"] = pad
    kwargs.update(spec.generate_kwargs)
    if spec.uses_assistant:
        kwargs["assistant_model"] = ctx.assistant
    drafter = ctx.drafter_for(spec) if spec.uses_drafter else None
    memory = memory_key or method
    if drafter is not None:
        kwargs["assistant_model"] = drafter
        kwargs.update({f"oneiro_{k}": v for k, v in spec.oneiro_settings.items()})
        # each oneiro method keeps its own learned policy (calibration, t(k)), as if it ran alone
        drafter.policy_state = ctx.policy_states.get(method)
        drafter.suffix_memory = ctx.memories.get(memory)  # kept across questions: a run of repeated tasks
    ctx.recorder.reset()
    cuda = input_ids.device.type == "cuda"
    if cuda:
        torch.cuda.synchronize()
    # a drafter's generate enters cpu_kernels itself; a drafterless method on oneiro kernels enters it here, and
    # once around the whole call, as the drafter does (the first entry reorders weights and is warmed up)
    kernels = cpu_kernels(model) if spec.kernels != STOCK and drafter is None else contextlib.nullcontext()
    with kernels:
        start = time.perf_counter()
        out = model.generate(input_ids, **kwargs)
        if cuda:
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
    result = {
        "kernels": ctx.kernel_labels.get(spec.kernels, spec.kernels),
        "tokens": out[0, input_ids.shape[1]:].tolist(),
        "rows": out[:, input_ids.shape[1]:].tolist(),
        "wall_time": elapsed,
        "draft_lengths": list(ctx.recorder.draft_lengths),
        "accepted": list(ctx.recorder.accepted),
        "draft_time_s": ctx.recorder.draft_s,
        "oneiro_stats": None,
    }
    if drafter is not None:
        ctx.policy_states[method] = drafter.policy_state
        ctx.memories[memory] = drafter.suffix_memory
        stats = drafter.last_stats  # the call's own log (chain or tree); the recorder saw nothing of it
        # as the recorder logs hf-* methods: the prefill is a pass without drafts, then one entry per pass
        # (a tree pass over d nodes feeds d + 1 tokens)
        per_pass = stats.tree_nodes if spec.oneiro_settings.get("tree") else stats.draft_lengths
        result["draft_lengths"] = [0, *per_pass]
        result["accepted"] = [0, *(n - 1 for n in stats.accept_lengths)]
        result["draft_time_s"] = stats.draft_time_s
        stats = stats.as_dict()
        result["oneiro_stats"] = {k: stats[k] for k in _ONEIRO_STAT_KEYS if k in stats}
    return result


def _ids(ids: list[int], device):
    """(1, T) input ids for generate."""
    import torch

    return torch.tensor([ids], device=device)


def _add_stats(total: dict | None, stats: dict | None) -> dict | None:
    if stats is None:
        return total
    if total is None:
        return copy.deepcopy(stats)
    for k, v in stats.items():
        if isinstance(v, dict):
            for kk, vv in v.items():
                total[k][kk] = total[k].get(kk, 0) + vv
        else:
            total[k] = total.get(k, 0) + v
    return total


def run_question(ctx: BenchContext, method: str, question: dict, max_new_tokens: int) -> dict:
    """All turns of one question with one method; later turns see this method's own earlier answers."""
    messages: list[dict] = []
    choice: dict[str, list] = {k: [] for k in ("turns", "new_tokens", "wall_time", "decoding_steps",
                                               "accept_lengths", "draft_lengths", "output_ids")}
    draft_s, oneiro_stats, kernels = 0.0, None, None
    for turn in question["turns"]:
        messages.append({"role": "user", "content": turn})
        input_ids = _ids(encode_prompt(ctx.tokenizer, messages), ctx.model.device)
        res = generate_once(ctx, method, input_ids, max_new_tokens)
        text = ctx.tokenizer.decode(res["tokens"], skip_special_tokens=True)
        messages.append({"role": "assistant", "content": text})
        choice["turns"].append(text)
        choice["new_tokens"].append(len(res["tokens"]))
        choice["wall_time"].append(res["wall_time"])
        choice["output_ids"].append(res["tokens"])
        steps = len(res["accepted"])
        choice["decoding_steps"].append(steps if steps else len(res["tokens"]))
        choice["accept_lengths"].extend(a + 1 for a in res["accepted"])
        choice["draft_lengths"].extend(res["draft_lengths"])
        draft_s += res["draft_time_s"]
        oneiro_stats = _add_stats(oneiro_stats, res["oneiro_stats"])
        kernels = res.get("kernels")
    record = {
        "question_id": question["question_id"],
        "category": question["category"],
        "answer_id": f"{question['question_id']}-{method}",
        "model_id": method,
        "choices": [{"index": 0, **choice}],
        "tstamp": time.time(),
        "draft_time_s": draft_s,
        "kernels": kernels,
    }
    if oneiro_stats is not None:
        record["oneiro_stats"] = oneiro_stats
    return record



def _note(text: str) -> None:
    print(f"oneiro-bench: {text}", file=sys.stderr)


def run_config(args, plan: Plan) -> dict:
    """The settings answers depend on, as stored in run_config.json (checked by --resume and merge)."""
    return {"target": plan.target.loader_arg, "dtype": args.dtype, "device": args.device,
            "max_new_tokens": args.max_new_tokens, "threads": args.threads, "drafter": plan.drafter,
            "early_exit_layer": args.early_exit_layer,
            "extra_drafters": {name: value for name, (value, _) in plan.extra_drafters.items()},
            "assistant": plan.assistant.loader_arg if plan.assistant else None,
            "pin_profile": getattr(args, "pin_profile", None),
            "drafter_call_ratio": getattr(args, "drafter_call_ratio", None)}


def prepare_out(out: Path, config: dict, names: list[str], resume: bool) -> dict[str, list[dict]]:
    """Set up --out for this run; return the answers each method already has (empty unless resuming).

    Without --resume, earlier answers and plots are removed; with it, settings that differ from the run
    being resumed are a BenchInputError, and lines cut by an interruption are dropped (re-run)."""
    answers_dir = out / "answers"
    answers_dir.mkdir(parents=True, exist_ok=True)
    if resume:
        stored_file = out / "run_config.json"
        stored = json.loads(stored_file.read_text()) if stored_file.is_file() else None
        with_answers = [m for m in names if (answers_dir / f"{m}.jsonl").exists()]
        conflicts = resume_conflicts(stored, config, with_answers) if stored and with_answers else []
        if conflicts:
            raise BenchInputError(f"--resume into {out} with other settings than its answers were made with: "
                                  + "; ".join(conflicts) + ". Fix: use the same settings, or a new --out.")
    else:
        for old in list(answers_dir.glob("*.jsonl")) + list((out / "plots").glob("*.png")):
            old.unlink()
    (out / "run_config.json").write_text(json.dumps(config, indent=2))
    records: dict[str, list[dict]] = {}
    for m in names:
        file = answers_dir / f"{m}.jsonl"
        recs, dropped = read_answers(file)
        if dropped:
            _note(f"{file}: dropped {dropped} incomplete line(s); those questions re-run")
        if file.exists():
            write_answers(file, recs)
        records[m] = recs
    return records


def _check_relaxed_methods(drafter, plan: Plan) -> None:
    for spec in plan.specs:
        if spec.relaxed:
            try:
                drafter.drafting_settings(**spec.oneiro_settings)
            except (TypeError, ValueError) as err:
                raise BenchInputError(
                    f"method {spec.name} needs relaxed verification (oneiro_verification="
                    f"{spec.oneiro_settings['verification']!r}), which this oneiro-hf cannot run: {err}. "
                    f"Fix: drop {spec.name} from --methods, or update oneiro-hf.") from err


def load_models(args, plan: Plan) -> BenchContext:
    """Load the target, drafters and assistant once, seed the drafters' policies, and warm every method up."""
    import torch

    from .. import loading

    needs_drafter = any(s.uses_drafter and s.drafter_name is None for s in plan.specs)
    model, tokenizer, drafter = loading.load_target_and_drafter(
        plan.target.loader_arg, plan.drafter, args.dtype, needs_drafter=needs_drafter, device=args.device)
    drafters = {None: drafter} if drafter is not None else {}
    for name, (value, _) in plan.extra_drafters.items():
        drafters[name] = loading.load_drafter(model, value)
    assistant = None
    if plan.assistant is not None:
        assistant, a_tok, _ = loading.load_target_and_drafter(
            plan.assistant.loader_arg, None, args.dtype, needs_drafter=False, device=args.device)
        if a_tok.get_vocab() != tokenizer.get_vocab():
            raise BenchInputError(f"--assistant {args.assistant} has another tokenizer than the target; "
                                  "hf-assistant needs the same one.")
    for d in drafters.values():
        _check_relaxed_methods(d, plan)
        if plan.profile is not None:
            d.use_latency_profile(plan.profile)
    measured = plan.profile.get("threads") if plan.profile is not None else None
    if args.device == "cpu" and measured and measured != torch.get_num_threads():
        _note(f"note: the latency profile {plan.profile_path} was measured with {measured} threads, this run "
              f"uses {torch.get_num_threads()}; re-run `oneiro-bench profile --threads "
              f"{torch.get_num_threads()}` for a matching one.")
    recorder = StepRecorder()
    recorder.install(model)
    ctx = BenchContext(model, tokenizer, drafters.get(None), assistant, {s.name: s for s in plan.specs}, recorder,
                       drafters={k: v for k, v in drafters.items() if k is not None})
    if getattr(args, "pin_profile", None) == "h200":  # decide as on the H200: its t(k) and drafter step cost, never re-learned
        from ..drafting.policy import DraftPolicyState
        from .profile import H200_PROFILE

        call_ratio = getattr(args, "drafter_call_ratio", None)
        call_ratio = H200_PROFILE["drafter_step_ratio"] if call_ratio is None else call_ratio
        for d in drafters.values():
            pinned = DraftPolicyState()
            pinned.pin_profile(H200_PROFILE["ratios"], H200_PROFILE["t1_s"], call_ratio)
            d.policy_state = pinned
    if any(s.kernels != STOCK for s in plan.specs):
        with cpu_kernels(model) as applied:  # what the oneiro-kernel methods run on, for every record and the report
            ctx.kernel_labels["oneiro"] = str(applied)
    initial = {name: d.policy_state for name, d in drafters.items()}
    ctx.policy_states = {s.name: copy.deepcopy(initial[s.drafter_name]) for s in plan.specs if s.uses_drafter}
    warm = _ids(encode_prompt(tokenizer, "Warm up the caches."), model.device)
    for spec in plan.specs:
        generate_once(ctx, spec.name, warm, WARMUP_TOKENS)
    ctx.memories.clear()  # the questions start with an empty memory: the warm-up's answer is no task of the run
    return ctx


def run_questions(ctx: BenchContext | None, todo: list[dict], records: dict[str, list[dict]], answers_dir: Path,
                  max_new_tokens: int) -> bool:
    """Every method on every question of `todo` it has no answer for, rotating the method order per question;
    appends each answer to records and to its file at once. Returns whether the run was interrupted."""
    from tqdm import tqdm

    names = list(records)
    done = {m: {r["question_id"] for r in recs} for m, recs in records.items()}
    try:
        with tqdm(total=len(todo), desc="questions", unit="q", dynamic_ncols=True) as bar:
            for i, q in enumerate(todo):
                for m in names[i % len(names):] + names[: i % len(names)]:
                    if q["question_id"] in done[m]:
                        continue
                    bar.set_postfix_str(f"{q['category']} {q['question_id']} {m}")
                    rec = run_question(ctx, m, q, max_new_tokens)
                    records[m].append(rec)
                    with open(answers_dir / f"{m}.jsonl", "a", encoding="utf-8") as fh:
                        fh.write(json.dumps(rec) + "\n")
                bar.update(1)
    except KeyboardInterrupt:
        print("\noneiro-bench: interrupted; finished answers are kept, re-run with --resume to continue.",
              file=sys.stderr)
        return True
    return False


def write_results(args, plan: Plan, records: dict[str, list[dict]], interrupted: bool) -> dict:
    """summary.json, report.md and the plots under --out; prints the report and returns the summary."""
    out = Path(args.out)
    summary = summarize(records, {q["question_id"]: q for q in plan.questions})
    summary["partial"] = interrupted
    summary["config"] = summary_config(args, plan)
    if plan.profile is not None:  # the t(k) every figure of the run is named with
        summary["profile"] = plan.profile
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    plots = {} if args.no_plots else make_plots(summary, records, out)
    report = report_markdown(summary, plots)
    (out / "report.md").write_text(report)
    print(report)
    _note(f"wrote {out / 'summary.json'} and {out / 'report.md'}")
    return summary


def summary_config(args, plan: Plan) -> dict:
    """summary.json's "config": the arguments, what they resolved to, and the software and threads of the run."""
    import torch
    import transformers

    return {
        **vars(args),
        "questions": str(plan.questions_file),
        "methods": [s.name for s in plan.specs],
        "n_questions": len(plan.questions),
        "drafter_resolved": plan.drafter_desc,
        "extra_drafters_resolved": {name: desc for name, (_, desc) in plan.extra_drafters.items()},
        "latency_profile_used": str(plan.profile_path) if plan.profile_path else None,
        "drafter_weights_sha256": weights_sha256(plan.drafter),
        "extra_drafters_weights_sha256": {name: weights_sha256(value)
                                          for name, (value, _) in plan.extra_drafters.items()},
        "threads": torch.get_num_threads(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }


def weights_sha256(drafter: str | None) -> str | None:
    """The sha256 of a drafter directory's weights (its safetensors files, in name order): what names the
    drafter a run measured, since one path may hold different weights over time; None for 'fresh' or none."""
    if not drafter or not Path(drafter).is_dir():
        return None
    files = sorted(Path(drafter).glob("*.safetensors"))
    if not files:
        return None
    digest = hashlib.sha256()
    for file in files:
        with file.open("rb") as stream:
            for block in iter(lambda: stream.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def run(args, plan: Plan) -> tuple[dict, bool]:
    """The whole run: answers under --out, then summary and report. Returns (summary, interrupted)."""
    import torch

    out = Path(args.out)
    names = [s.name for s in plan.specs]
    records = prepare_out(out, run_config(args, plan), names, args.resume)
    done = {m: {r["question_id"] for r in recs} for m, recs in records.items()}
    todo = [q for q in plan.questions if any(q["question_id"] not in done[m] for m in names)]
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    ctx = load_models(args, plan) if todo else None
    interrupted = run_questions(ctx, todo, records, out / "answers", args.max_new_tokens)
    return write_results(args, plan, records, interrupted), interrupted
