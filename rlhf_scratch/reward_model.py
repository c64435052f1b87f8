"""`python -m rlhf_scratch.reward_model` (= `rlhf reward-model`): a Bradley–Terry reward model.

A documented command path, kept as a file; the command lives in rlhf_scratch/commands/reward_model.py.
"""

import sys

from rlhf_scratch.commands.reward_model import main

if __name__ == "__main__":
    sys.exit(main())
