"""summary.json and report.md of an oneiro-bench run stopped before its last question, without loading a model.

    python scripts/summarize_partial_run.py RUN --questions FILE --profile PROFILE.json

Keeps the questions every method answered (a run killed mid-question has answers from some methods only), marks
the summary "partial" and names the profile the run was given with --latency-profile. A run stopped with Ctrl-C
writes this itself; a background run, which ignores SIGINT, is stopped with SIGTERM and summarised here.
"""

from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path

from oneiro_hf.bench.answers import load_questions, read_run_answers
from oneiro_hf.bench.report import report_markdown, summarize


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run")
    p.add_argument("--questions", required=True)
    p.add_argument("--profile", required=True)
    args = p.parse_args()
    run = Path(args.run)
    records = read_run_answers(run)
    answered = collections.Counter(r["question_id"] for rows in records.values() for r in rows)
    complete = {q for q, n in answered.items() if n == len(records)}
    questions = {q["question_id"]: q for q in load_questions(args.questions) if q["question_id"] in complete}
    summary = summarize(records, questions)
    summary["partial"] = True
    summary["profile"] = json.loads(Path(args.profile).read_text())
    config = json.loads((run / "run_config.json").read_text())
    summary["config"] = {**config, "questions": args.questions, "n_questions": len(questions),
                         "categories": sorted({q["category"] for q in questions.values()})}
    (run / "summary.json").write_text(json.dumps(summary, indent=2))
    (run / "report.md").write_text(report_markdown(summary, {}))
    print(f"{len(questions)} questions every method answered: {sorted(questions)}; wrote {run}/summary.json")


if __name__ == "__main__":
    main()
