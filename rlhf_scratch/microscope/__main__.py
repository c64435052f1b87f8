"""`python -m rlhf_scratch.exact --out DIR`: see `rlhf_scratch.microscope.cli`."""

import sys

from rlhf_scratch.microscope.cli import main

if __name__ == "__main__":
    sys.exit(main())
