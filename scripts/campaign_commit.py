"""git add + commit of the paths a campaign milestone changed (only those); nothing to commit is fine.

    oneiro-train campaign ... --on_milestone 'python scripts/campaign_commit.py'

The campaign calls it as `campaign_commit.py MESSAGE PATH [PATH ...]` after the dataset grows and after each
milestone, so a stopped campaign resumes on another machine from what is committed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("message", help="the commit message (the campaign writes what the milestone measured)")
    parser.add_argument("paths", nargs="+", help="the files and folders the milestone changed; only these are committed")
    args = parser.parse_args(argv)
    message, paths = args.message, args.paths
    subprocess.run(["git", "add", "--", *paths], check=True)
    staged = subprocess.run(["git", "diff", "--cached", "--quiet", "--", *paths], check=False)
    if staged.returncode:
        subprocess.run(["git", "commit", "-q", "-m", message, "--", *paths], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
