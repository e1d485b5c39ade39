"""What-if: every decision as on the H200 (--pin-profile h200), but with a drafter call costing CALL_RATIO x t(1)
instead of the measured 0.18 (a cheaper call, e.g. CUDA graphs, not built yet). A model, labelled as such."""
import os
import sys

from oneiro_hf.tree import cost

cost.H200_PROFILE["drafter_step_ratio"] = float(os.environ["CALL_RATIO"])
from oneiro_hf.bench.cli import main  # noqa: E402

sys.exit(main())
