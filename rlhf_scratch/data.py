"""`python -m rlhf_scratch.data` (= `rlhf data`): a task's problems as verl's data files.

A documented command path, kept as a file; the command lives in rlhf_scratch/commands/data.py.
"""

import sys

from rlhf_scratch.commands.data import main

if __name__ == "__main__":
    sys.exit(main())
