"""What `generate` calls once a drafter is bound: the hook that routes `generate(assistant_model=drafter)`
(`hook`, `guard`, `inputs`), the per-call state (`session`), chains in transformers' own loop
(`candidate_generator`, `verification`), and the one loop of trees and batches (`loop/`)."""
