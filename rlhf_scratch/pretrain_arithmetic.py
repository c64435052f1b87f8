"""`python -m rlhf_scratch.pretrain_arithmetic` (= `rlhf pretrain-arithmetic`): build the arithmetic task's model.

A documented command path, kept as a file; the command lives in rlhf_scratch/commands/arithmetic_lm.py.
"""

import sys

from rlhf_scratch.commands.arithmetic_lm import main

if __name__ == "__main__":
    sys.exit(main())
