"""`python -m rlhf_scratch.preferences` (= `rlhf preferences`): preference pairs labelled by a gold reward.

A documented command path, kept as a file; the command lives in rlhf_scratch/commands/preferences.py.
"""

import sys

from rlhf_scratch.commands.preferences import main

if __name__ == "__main__":
    sys.exit(main())
