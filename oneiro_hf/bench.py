"""oneiro-bench: Spec-Bench-style wall-clock comparison of decoding methods on one target.

Methods run interleaved per prompt (the order rotates), after a warm-up, so their ratios hold on a
noisy machine. Answers are written per method in Spec-Bench's answer-record format, one line per
finished question, so an interrupted run keeps its work and `--resume` continues it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

LOSSLESS = {"greedy", "hf-lookup", "oneiro-lookup", "oneiro-latent", "oneiro-hybrid"}
METHODS = ("greedy", "hf-lookup", "oneiro-lookup", "oneiro-latent", "oneiro-hybrid")


class BenchInputError(ValueError):
    """A benchmark argument or input file is unusable; raised before any model loads."""


def load_questions(path: str | Path, per_category: int | None = None) -> list[dict]:
    """Read Spec-Bench question JSONL (question_id, category, turns), optionally N per category."""
    path = Path(path)
    if not path.is_file():
        raise BenchInputError(f"questions file {path} does not exist. Fix: pass --questions FILE.jsonl.")
    rows, seen = [], defaultdict(int)
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise BenchInputError(f"{path}:{lineno} is not valid JSON ({err}).") from err
        if not isinstance(row, dict) or not {"question_id", "category", "turns"} <= set(row) or not row["turns"]:
            raise BenchInputError(f"{path}:{lineno} needs question_id, category and a non-empty turns list.")
        if per_category is not None and seen[row["category"]] >= per_category:
            continue
        seen[row["category"]] += 1
        rows.append(row)
    if not rows:
        raise BenchInputError(f"{path} holds no questions.")
    return rows


def parse_methods(text: str) -> list[str]:
    methods = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods:
        raise BenchInputError(f"unknown method(s) {unknown}. Choose from: {', '.join(METHODS)}.")
    if "greedy" not in methods:
        methods.insert(0, "greedy")  # every ratio is against greedy, measured in the same run
    return methods


def _generate(model, drafter, method: str, input_ids, max_new_tokens: int):
    kwargs: dict[str, Any] = {"max_new_tokens": max_new_tokens, "do_sample": False}
    if method == "hf-lookup":
        kwargs["prompt_lookup_num_tokens"] = 10
    elif method.startswith("oneiro-"):
        kwargs["assistant_model"] = drafter
        kwargs["oneiro_mode"] = method.split("-", 1)[1]
    start = time.perf_counter()
    out = model.generate(input_ids, **kwargs)
    elapsed = time.perf_counter() - start
    stats = drafter.last_stats if method.startswith("oneiro-") else None
    return out[0, input_ids.shape[1]:].tolist(), elapsed, stats


def run_question(model, tokenizer, drafter, method, question, max_new_tokens) -> dict:
    """All turns of one question with one method; later turns see this method's own earlier answers."""
    messages, turns, new_tokens, wall, accept_lengths = [], [], [], [], []
    draft_s = verify_s = 0.0
    for turn in question["turns"]:
        messages.append({"role": "user", "content": turn})
        if tokenizer.chat_template:
            enc = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                                return_dict=True)
            input_ids = enc["input_ids"]
        else:
            input_ids = tokenizer("\n\n".join(m["content"] for m in messages), return_tensors="pt").input_ids
        input_ids = input_ids.to(model.device)
        tokens, elapsed, stats = _generate(model, drafter, method, input_ids, max_new_tokens)
        text = tokenizer.decode(tokens, skip_special_tokens=True)
        messages.append({"role": "assistant", "content": text})
        turns.append(text)
        new_tokens.append(len(tokens))
        wall.append(elapsed)
        if stats is not None:
            accept_lengths.extend(stats.accept_lengths)
            draft_s += stats.draft_time_s
            verify_s += stats.verify_time_s
    return {
        "question_id": question["question_id"],
        "category": question["category"],
        "answer_id": f"{question['question_id']}-{method}",
        "model_id": method,
        "choices": [{"index": 0, "turns": turns, "new_tokens": new_tokens, "wall_time": wall,
                     "accept_lengths": accept_lengths}],
        "tstamp": time.time(),
        "draft_time_s": draft_s,
        "verify_time_s": verify_s,
    }


def summarize(records: dict[str, list[dict]]) -> dict:
    """summary.json: per method, overall and per category, with ratios against greedy on the same prompts."""
    greedy_text = {r["question_id"]: r["choices"][0]["turns"] for r in records.get("greedy", [])}

    def block(rows: list[dict], greedy_rows: list[dict]) -> dict:
        tokens = sum(sum(r["choices"][0]["new_tokens"]) for r in rows)
        wall = sum(sum(r["choices"][0]["wall_time"]) for r in rows)
        g_tokens = sum(sum(r["choices"][0]["new_tokens"]) for r in greedy_rows)
        g_wall = sum(sum(r["choices"][0]["wall_time"]) for r in greedy_rows)
        acc = [a for r in rows for a in r["choices"][0]["accept_lengths"]]
        draft = sum(r.get("draft_time_s", 0.0) for r in rows)
        same = [r["choices"][0]["turns"] == greedy_text.get(r["question_id"]) for r in rows]
        tps = tokens / wall if wall else 0.0
        g_tps = g_tokens / g_wall if g_wall else 0.0
        return {
            "tokens_per_s": tps,
            "speedup_vs_greedy": tps / g_tps if g_tps else None,
            "mean_accepted_tokens": statistics.fmean(acc) if acc else None,
            "draft_time_share": draft / wall if wall else 0.0,
            "identical_to_greedy": sum(same) / len(same) if same else None,
            "n_prompts": len(rows),
            "new_tokens": tokens,
        }

    summary: dict[str, Any] = {"methods": {}}
    greedy_rows = records.get("greedy", [])
    for method, rows in records.items():
        cats = sorted({r["category"] for r in rows})
        entry = {"overall": block(rows, greedy_rows), "categories": {}}
        for cat in cats:
            entry["categories"][cat] = block([r for r in rows if r["category"] == cat],
                                             [r for r in greedy_rows if r["category"] == cat])
        summary["methods"][method] = entry
        if method in LOSSLESS and entry["overall"]["identical_to_greedy"] not in (None, 1.0):
            summary.setdefault("lossless_violations", []).append(method)
    return summary


def report_markdown(summary: dict) -> str:
    methods = list(summary["methods"])
    cats = sorted({c for m in methods for c in summary["methods"][m]["categories"]})
    lines = ["| category | " + " | ".join(methods) + " |", "|---" * (len(methods) + 1) + "|"]
    for cat in cats + ["overall"]:
        cells = []
        for m in methods:
            e = summary["methods"][m]["overall"] if cat == "overall" else summary["methods"][m]["categories"].get(cat)
            if not e:
                cells.append("")
                continue
            tau = e["mean_accepted_tokens"]
            cells.append(f"{e['speedup_vs_greedy']:.2f}x ({e['tokens_per_s']:.1f} tok/s"
                         + (f", tau {tau:.2f}" if tau else "") + ")")
        lines.append(f"| {'**overall**' if cat == 'overall' else cat} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("| method | draft share of wall time | identical to greedy |")
    lines.append("|---|---|---|")
    for m in methods:
        e = summary["methods"][m]["overall"]
        lines.append(f"| {m} | {e['draft_time_share']:.1%} | {e['identical_to_greedy']:.0%} |")
    if summary.get("lossless_violations"):
        lines.insert(0, f"**LOSSLESS VIOLATION: {summary['lossless_violations']} differ from greedy.**\n")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="oneiro-bench", description=__doc__)
    parser.add_argument("--target", default="smollm2-135m-instruct", help="reference model name or HF path")
    parser.add_argument("--drafter", default=None, help="drafter dir; default: the shipped one, else a fresh one")
    parser.add_argument("--questions", default="../shared/data/spec_bench/question.jsonl")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--per-category", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--latency-profile", default=None, help="JSON from profile_verification_latency")
    parser.add_argument("--out", default="runs/bench")
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args(argv)

    questions = load_questions(args.questions, args.per_category)  # fail before any model loads
    methods = parse_methods(args.methods)
    out = Path(args.out)
    (out / "answers").mkdir(parents=True, exist_ok=True)
    done: dict[str, set] = {m: set() for m in methods}
    records: dict[str, list[dict]] = {m: [] for m in methods}
    for m in methods:
        f = out / "answers" / f"{m}.jsonl"
        if f.exists() and not args.resume:
            f.unlink()
        elif f.exists():
            for line in f.read_text().splitlines():
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut by an interruption: that question is re-run
                records[m].append(rec)
                done[m].add(rec["question_id"])

    import torch
    from tqdm import tqdm

    from .loading import load_target_and_drafter

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    model, tokenizer, drafter = load_target_and_drafter(args.target, args.drafter, args.dtype,
                                                        needs_drafter=any(m.startswith("oneiro") for m in methods))
    if drafter is not None and args.latency_profile:
        from .latency import load_profile

        drafter.use_latency_profile(load_profile(args.latency_profile))
    warm = tokenizer("Warm up the caches.", return_tensors="pt").input_ids.to(model.device)
    for m in methods:
        _generate(model, drafter, m, warm, 8)
    todo = [q for q in questions if any(q["question_id"] not in done[m] for m in methods)]
    for i, q in enumerate(tqdm(todo, desc="questions")):
        order = methods[i % len(methods):] + methods[: i % len(methods)]
        for m in order:
            if q["question_id"] in done[m]:
                continue
            rec = run_question(model, tokenizer, drafter, m, q, args.max_new_tokens)
            records[m].append(rec)
            with open(out / "answers" / f"{m}.jsonl", "a") as fh:
                fh.write(json.dumps(rec) + "\n")
    summary = summarize(records)
    summary["config"] = {k: v for k, v in vars(args).items()}
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    (out / "report.md").write_text(report_markdown(summary))
    print(report_markdown(summary))
    if summary.get("lossless_violations"):
        print(f"LOSSLESS VIOLATION: {summary['lossless_violations']}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
