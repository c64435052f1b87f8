"""`python -m rlhf_scratch.compare` (= `rlhf compare`): the algorithms side by side over seeds.

A documented command path, kept as a file; the command lives in rlhf_scratch/studies/compare.py.
"""

import sys

from rlhf_scratch.commands.compare import main

if __name__ == "__main__":
    sys.exit(main())
