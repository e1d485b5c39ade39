"""The one drafting engine: what a chain, a tree and every row of a batch are drafted by (docs/design.md).

The engine knows nothing of the target pass: `oneiro_hf.generation` verifies.
"""
