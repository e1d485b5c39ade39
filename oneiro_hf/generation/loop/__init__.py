"""The one decoding loop of trees, chains run as trees, and batches, run by `generate` as `custom_generate`.

`custom_generate` is the callable `generate` runs (one prompt as a batch of one); `decode` the loop itself (draft,
one target pass, judge, compact); `sequence` each row's bookkeeping; `tree_mask` the 4-D mask a target takes for a
tree pass; `judge` the greedy and sampled verdicts on a verified tree; `target_cache` compaction of the target's
cache to the accepted path. The drafts come from `oneiro_hf.drafting`.
"""
