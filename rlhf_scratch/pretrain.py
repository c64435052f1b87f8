"""`python -m rlhf_scratch.pretrain` (= `rlhf pretrain`): rebuild the offline tiny preset.

A documented command path, kept as a file; the command lives in rlhf_scratch/commands/pretrain.py.
"""

import sys

from rlhf_scratch.commands.pretrain import main

if __name__ == "__main__":
    sys.exit(main())
