"""`python -m rlhf_scratch.exact` (= `rlhf exact`): the exact-gradient microscope.

A documented command path, kept as a file; the command lives in rlhf_scratch/microscope/cli.py.
"""

import sys

from rlhf_scratch.microscope.cli import main

if __name__ == "__main__":
    sys.exit(main())
