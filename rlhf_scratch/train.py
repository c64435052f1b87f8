"""`python -m rlhf_scratch.train` (= `rlhf train`): RLHF toward a task's reward (PPO, RLOO, Online DPO, GRPO).

A documented command path, kept as a file; the command lives in rlhf_scratch/commands/train.py.
"""

import sys

from rlhf_scratch.commands.train import main

if __name__ == "__main__":
    sys.exit(main())
