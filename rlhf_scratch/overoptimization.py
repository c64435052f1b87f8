"""`python -m rlhf_scratch.overoptimization` (= `rlhf overoptimization`): the reward over-optimisation study.

A documented command path, kept as a file; the command lives in rlhf_scratch/studies/overoptimization/.
"""

import sys

from rlhf_scratch.commands.overoptimization import main

if __name__ == "__main__":
    sys.exit(main())
