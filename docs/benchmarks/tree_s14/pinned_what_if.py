"""What-if runs of `oneiro-bench --pin-profile h200`: every decision as on the H200, with t(k) at k the H200 profile
never measured set by EXTRA_RATIOS ("24:1.169,32:1.169"), labelled as assumed. (A cheaper drafter call is the
`--drafter-call-ratio` flag since session 14; the session-14 records at 0.05 were made with this script's earlier
form, which set the H200 call ratio the same way.)"""
import os
import sys

from oneiro_hf.tree import cost

for item in filter(None, os.environ.get("EXTRA_RATIOS", "").split(",")):
    k, ratio = item.split(":")
    cost.H200_PROFILE["ratios"][int(k)] = float(ratio)
from oneiro_hf.bench.cli import main  # noqa: E402

sys.exit(main())
