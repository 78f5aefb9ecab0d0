"""`python -m unilab.cli ...` is the `unilab` console script."""

import sys

from unilab.cli import main

sys.exit(main())
