"""The one drafting engine: what a chain, a tree and every row of a batch are drafted by.

A draft is a token tree below the last accepted token; a chain is a tree of one branch. `engine.SequenceEngine`
drafts for one sequence by asking its `sources` in order (`DraftSource`: lookup, latent, memory, or a new kind) and
learns from each verdict; `build` grows lookup, memory and latent branches
(`lookup`'s `NgramIndex`, `memory`'s `SuffixMemory`, the drafter through `context`, its KV cache in `kv_cache`);
`cost` keeps what pays (nodes, a chain's path, a batch's width, whether to call the drafter) by `policy`'s learned
t(k) and acceptance, t(k) measured by `latency`; `view` is the engine's view of a call's drafting settings;
`draft` what one round proposes and what its verification decided; `stats` what a call counted. The engine knows
nothing of the target pass: `oneiro_hf.generation` (chains in transformers' loop, and the tree and batch loop)
verifies.
"""
