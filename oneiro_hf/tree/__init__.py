"""Tree verification: several candidate continuations checked in one target pass, lossless.

`tree.py` the token tree and its flattening, `attention.py` the 4-D mask a target takes, `cache.py`
compaction to the accepted path, `verify.py` greedy and sampling verdicts, `build.py` tree drafts,
`cost.py` the tree size the latency profile pays for, `loop.py` the decoding loop `generate` runs.
"""
