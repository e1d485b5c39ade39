"""`python -m oneiro_hf.bench ...` is `oneiro-bench ...`."""

from .cli import main

raise SystemExit(main())
