"""The one drafting engine: what a chain, a tree and every row of a batch are drafted by.

A draft is a token tree below the last accepted token; a chain is a tree of one branch. `engine.SequenceDrafter`
drafts for one sequence and learns from each verdict; `build` grows lookup and latent branches (`lookup`'s
`NgramIndex`, the drafter through `drafter_context`); `cost` keeps what pays (nodes, a chain's path, a batch's
width, whether to call the drafter) by `policy`'s learned t(k) and acceptance; `settings` is the engine's view of
a call's drafting settings; `draft` what one round proposes and what its verification decided. The engine knows
nothing of the target pass: `candidate_generator.py` (chains in transformers' loop) and `tree/` (the tree and
batch loop) verify.
"""
