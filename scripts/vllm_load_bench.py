"""vLLM's OpenAI server under load: plain, `ngram`, `suffix` and the exported oneiro drafter (fixed k, and k backed
off by batch size with vLLM's `num_speculative_tokens_per_batch_size`; `oneiro-hybrid` and `oneiro-hybrid-backoff`,
the same exported with `--hybrid`), each driven by 1, 4 and 16 concurrent
clients over Spec-Bench questions (chat requests, greedy). Records output tokens/s, per-request latency, accepted
drafts from the server's /metrics, and how many texts equal plain's at the same concurrency.

Run it with .venv-vllm and the CPU environment of docs/serving.md (the server runs in this interpreter):

    LD_PRELOAD=$PWD/.venv-vllm/lib/libiomp5.so VLLM_CPU_KVCACHE_SPACE=2 VLLM_CPU_OMP_THREADS_BIND=nobind \\
        .venv-vllm/bin/python scripts/vllm_load_bench.py --questions ../shared/data/spec_bench/question.jsonl \\
        --out runs/vllm_load_smollm2.json

`--dry-run` checks the inputs, exports the drafter and prints each server's command without starting one (the
script a device lease runs first). Each mode gets a fresh server on the loopback interface, then every
concurrency level in turn, each after a warm-up at its concurrency that is not counted; the server is stopped
before the next mode starts.
A mode vLLM cannot start (e.g. `suffix` without the arctic-inference package) is recorded with the reason.
Spec-Bench is evaluation data only.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

from oneiro_hf.bench.profile import cpu_model
from oneiro_hf.bench.runner import weights_sha256
from oneiro_hf.serving.measure import benchmark_modes
from oneiro_hf.serving.vllm_server import ServerFailed, VllmServer, concurrently, error_lines, server_command

ROOT = Path(__file__).resolve().parent.parent
COUNTERS = ("drafts", "draft_tokens", "accepted", "generation_tokens")


def parse_schedule(text: str) -> list[list[int]]:
    """"1-2:3,3-8:2,9-256:1" -> [[1, 2, 3], [3, 8, 2], [9, 256, 1]] (batch sizes from-to inclusive: k)."""
    schedule = []
    for part in text.split(","):
        sizes, k = part.split(":")
        low, high = sizes.split("-")
        schedule.append([int(low), int(high), int(k)])
    return schedule


def server_extra(args, mode: str) -> list[str]:
    """Every client's request in one batch; a priced folder's drafts of their own lengths need vLLM's synchronous
    scheduling (on by default where vLLM runs EAGLE asynchronously, as on a GPU)."""
    extra = ["--max-num-seqs", str(max(args.clients))]
    return extra + (["--no-async-scheduling"] if mode.endswith("-priced") else [])


def gained(after: dict, before: dict) -> dict:
    out = {key: after.get(key, 0) - before.get(key, 0) for key in COUNTERS if key in after}
    if "accepted_per_position" in after:
        old = before.get("accepted_per_position") or [0] * len(after["accepted_per_position"])
        out["accepted_per_position"] = [a - b for a, b in zip(after["accepted_per_position"], old)]
    return out


def warm_up(server: VllmServer, clients: int, max_tokens: int) -> None:
    """`clients` concurrent requests of staggered lengths, not counted: the batch shrinks from `clients` to one as
    they finish, so the kernels for every batch shape the level will run are built before it is timed (a fresh
    server's first level otherwise pays for them). The prompts are not Spec-Bench questions."""
    lengths = [max(4, max_tokens * (i + 1) // clients) for i in range(clients)]
    calls = [lambda n=n, i=i: server.chat([{"role": "user", "content": f"Count from {i} to {i + 40}."}], n)
             for i, n in enumerate(lengths)]
    concurrently(calls, clients)


def load_level(server: VllmServer, questions: list[str], clients: int, max_tokens: int) -> dict:
    """Every question once, from `clients` concurrent clients: throughput, latency, the texts, the counters."""
    before = server.metrics()
    calls = [lambda q=q: server.chat([{"role": "user", "content": q}], max_tokens) for q in questions]
    start = time.perf_counter()
    replies = concurrently(calls, clients)
    wall = time.perf_counter() - start
    latencies = sorted(r.seconds for r in replies)
    tokens = sum(r.completion_tokens for r in replies)
    return {"clients": clients, "requests": len(replies), "output_tokens": tokens, "seconds": round(wall, 3),
            "output_tokens_per_s": round(tokens / wall, 2),
            "latency_s": {"mean": round(statistics.mean(latencies), 3),
                          "p50": round(latencies[len(latencies) // 2], 3),
                          "p90": round(latencies[min(len(latencies) - 1, int(0.9 * len(latencies)))], 3),
                          "max": round(latencies[-1], 3)},
            "spec": gained(server.metrics(), before), "texts": [r.text for r in replies]}


def run_mode(name: str, spec: dict | None, target: str, questions: list[str], args, logs: Path) -> dict:
    """One server per mode, every concurrency level on it in turn; with `--server-per-level` a new server for each
    level, so that a method that remembers earlier requests (vLLM's `suffix` caches every response) does not answer
    a level's questions from the level before, which sends the same ones."""
    if args.server_per_level and len(args.clients) > 1:
        parts = []
        for clients in args.clients:
            parts.append(run_levels(name, spec, target, questions, [clients], args, logs / f"{clients}"))
            if "unavailable" in parts[-1]:  # the next levels' servers would not start either
                return parts[-1]
        return {"start_seconds": [part["start_seconds"] for part in parts],
                "levels": [level for part in parts for level in part["levels"]],
                "exit_status": [part["exit_status"] for part in parts], "speculative_config": spec,
                "server_per_level": True}
    return run_levels(name, spec, target, questions, args.clients, args, logs)


def run_levels(name: str, spec: dict | None, target: str, questions: list[str], levels_to_run: list[int], args,
               logs: Path) -> dict:
    logs.mkdir(parents=True, exist_ok=True)
    server = VllmServer(sys.executable, target, logs / f"{name}.log", speculative_config=spec, dtype=args.dtype,
                        max_model_len=args.max_model_len, extra=server_extra(args, name),
                        eager=not args.compiled)
    start = time.perf_counter()
    try:
        server.start()
    except ServerFailed as failed:
        reasons = error_lines(server.log_tail(10**6)) or [str(failed).splitlines()[0]]
        print(f"[{name}] could not start: {reasons[0]}", flush=True)
        return {"unavailable": reasons[0]}
    try:
        started = round(time.perf_counter() - start, 1)
        levels = []
        for clients in levels_to_run:
            warm_up(server, clients, args.max_new_tokens)
            level = load_level(server, questions, clients, args.max_new_tokens)
            print(f"[{name}] {clients:>2} clients: {level['output_tokens_per_s']} tok/s, latency p50 "
                  f"{level['latency_s']['p50']} s, spec {level['spec']}", flush=True)
            levels.append(level)
    finally:
        status = server.stop()
    return {"start_seconds": started, "levels": levels, "exit_status": status, "speculative_config": spec}


def run_interleaved(chosen: list[str], modes: dict, target: str, questions: list[str], args, logs: Path,
                    save, results: dict) -> None:
    """Every mode's server up at once; each concurrency level runs mode after mode, in alternating order from one
    level to the next, so that a load that changes during the run weighs on every mode alike."""
    servers = {}
    try:
        for name in chosen:
            server = VllmServer(sys.executable, target, logs / f"{name}.log", speculative_config=modes[name],
                                dtype=args.dtype, max_model_len=args.max_model_len, extra=server_extra(args, name),
                                eager=not args.compiled)
            try:
                server.start()
            except ServerFailed as failed:
                reasons = error_lines(server.log_tail(10**6)) or [str(failed).splitlines()[0]]
                results[name] = {"unavailable": reasons[0]}
                continue
            servers[name] = server
            results[name] = {"levels": [], "speculative_config": modes[name]}
        for index, clients in enumerate(args.clients):
            order = list(servers) if index % 2 == 0 else list(reversed(servers))
            for name in order:
                warm_up(servers[name], clients, args.max_new_tokens)
                level = load_level(servers[name], questions, clients, args.max_new_tokens)
                level["order"] = order.index(name)
                print(f"[{name}] {clients:>2} clients: {level['output_tokens_per_s']} tok/s, latency p50 "
                      f"{level['latency_s']['p50']} s, spec {level['spec']}", flush=True)
                results[name]["levels"].append(level)
            save()
    finally:
        for name, server in servers.items():
            results[name]["exit_status"] = server.stop()
        save()


def compare_to_plain(results: dict) -> None:
    """Per mode and level: texts equal to plain's at the same concurrency, and throughput relative to plain."""
    plain = results.get("plain", {}).get("levels")
    if not plain:
        return
    for result in results.values():
        for level, reference in zip(result.get("levels", []), plain):
            level["identical_to_plain"] = sum(a == b for a, b in zip(level["texts"], reference["texts"]))
            level["throughput_vs_plain"] = round(level["output_tokens_per_s"] / reference["output_tokens_per_s"], 3)


def write_record(out: str | None, conditions: dict, results: dict, load_before: float) -> None:
    """The run's JSON record so far (modes compared with plain's texts and throughput where plain ran)."""
    import vllm

    compare_to_plain(results)
    record = {
        "what": "vLLM's OpenAI server (python -m vllm.entrypoints.openai.api_server) under 1/4/16 concurrent "
                "clients, chat requests, greedy: plain, ngram, suffix, the oneiro drafter (fixed k, k by batch size)",
        "conditions": {**conditions, "vllm": vllm.__version__,
                       "load_average_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)]},
        "modes": results,
    }
    if out:
        Path(out).write_text(json.dumps(record, indent=2) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", required=True, help="Spec-Bench question.jsonl")
    parser.add_argument("--target", default="smollm2-135m-instruct")
    parser.add_argument("--drafter", default=str(ROOT / "drafters" / "smollm2-135m-instruct"))
    parser.add_argument("--per-category", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--max-model-len", type=int, default=2048)
    parser.add_argument("--clients", default="1,4,16", help="concurrency levels, in order")
    parser.add_argument("--k", type=int, default=3, help="num_speculative_tokens for ngram and the drafter")
    parser.add_argument("--backoff", default="1-2:3,3-8:2,9-1024:1",
                        help="oneiro-backoff's k by batch size, FROM-TO:K,... (vLLM's "
                             "num_speculative_tokens_per_batch_size)")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--step-profile", help="vLLM's engine steps (scripts/vllm_step_profile.py) for the "
                                               "oneiro-priced and oneiro-hybrid-priced modes")
    parser.add_argument("--modes", default="plain,ngram,suffix,oneiro,oneiro-backoff,oneiro-hybrid")
    parser.add_argument("--out", help="the record (JSON); the servers' logs go beside it")
    parser.add_argument("--compiled", action="store_true",
                        help="keep vLLM's compiled graphs (a GPU); default: --enforce-eager (a CPU, short start)")
    parser.add_argument("--interleave", action="store_true",
                        help="every mode's server at once, levels run mode after mode (a machine whose load changes)")
    parser.add_argument("--server-per-level", action="store_true",
                        help="start a new server for each concurrency level (each level sends the same questions: "
                             "a method with a cross-request cache, vLLM's suffix, would otherwise replay them)")
    parser.add_argument("--dry-run", action="store_true", help="check inputs, export, print commands; no server")
    args = parser.parse_args()
    args.clients = [int(c) for c in args.clients.split(",")]
    if args.interleave and args.server_per_level:
        parser.error("--interleave keeps one server per mode up for every level; --server-per-level starts one per "
                     "level. Fix: choose one.")
    from transformers import AutoTokenizer  # noqa: F401  (fails early outside a transformers environment)

    from oneiro_hf import __version__
    from oneiro_hf.bench.answers import load_questions
    from oneiro_hf.storage.reference_models import fetch_reference_model

    target = str(fetch_reference_model(args.target)) if "/" not in args.target else args.target
    questions = [q["turns"][0] for q in load_questions(args.questions, per_category=args.per_category)]
    chosen = args.modes.split(",")
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        profile = json.loads(Path(args.step_profile).read_text()) if args.step_profile else None
        try:
            modes = benchmark_modes(chosen, args.drafter, args.target, args.k, tmp,
                                    schedule=parse_schedule(args.backoff), step_profile=profile)
        except ValueError as err:
            raise SystemExit(str(err)) from err
        folder = Path(tmp) / "drafter"
        if args.dry_run:
            for name in chosen:
                command = server_command(sys.executable, target, 0, modes[name], args.dtype, args.max_model_len,
                                         server_extra(args, name), eager=not args.compiled)
                print(f"{name}: {shlex.join(command)}")
            print(f"{len(questions)} questions, clients {args.clients}, drafter sha256 {weights_sha256(args.drafter)}")
            return
        logs = Path(args.out).with_suffix("") if args.out else Path(tmp) / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        conditions = {
            "cpu": f"{cpu_model()}, {os.cpu_count()} cores", "oneiro_hf": __version__, "dtype": args.dtype, "enforce_eager": not args.compiled,
            "target": args.target, "drafter": os.path.relpath(args.drafter, ROOT),
            "drafter_weights_sha256": weights_sha256(args.drafter), "exported_sha256": weights_sha256(str(folder)),
            "k": args.k, "backoff": parse_schedule(args.backoff),
            "step_profile": os.path.relpath(args.step_profile, ROOT) if profile else None,
            "questions": f"Spec-Bench, first {args.per_category} of each category ({len(questions)}), first turn",
            "max_new_tokens": args.max_new_tokens, "clients": args.clients, "date": time.strftime("%Y-%m-%d %H:%M"),
            "LD_PRELOAD": os.path.basename(os.environ.get("LD_PRELOAD", "")) or None,
            "VLLM_CPU_OMP_THREADS_BIND": os.environ.get("VLLM_CPU_OMP_THREADS_BIND"),
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),  # None: vLLM's own choice (every core here)
            "server_per_level": args.server_per_level,
            "warm_up": "before each level, at its concurrency (not counted)",
        }
        results: dict[str, dict] = {}
        if args.interleave:
            conditions["interleaved"] = True
            run_interleaved(chosen, modes, target, questions, args, logs,
                            lambda: write_record(args.out, conditions, results, load_before), results)
        for name in [] if args.interleave else chosen:  # the record is rewritten after each mode: a run stopped
            results[name] = run_mode(name, modes[name], target, questions, args, logs)  # part-way keeps what it did
            write_record(args.out, conditions, results, load_before)
    for name, result in results.items():
        for level in result.get("levels", []):
            print(f"{name:>15} {level['clients']:>2} clients: {level['output_tokens_per_s']:>7} tok/s "
                  f"({level.get('throughput_vs_plain', '-')}x plain), p50 {level['latency_s']['p50']} s, "
                  f"identical {level.get('identical_to_plain', '-')}/{level['requests']}")
        if "unavailable" in result:
            print(f"{name:>15} unavailable: {result['unavailable']}")


if __name__ == "__main__":
    main()
