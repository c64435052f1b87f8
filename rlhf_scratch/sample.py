"""`python -m rlhf_scratch.sample` (= `rlhf sample`): a run's completions beside the reference's.

A documented command path, kept as a file; the command lives in rlhf_scratch/commands/sample.py.
"""

import sys

from rlhf_scratch.commands.sample import main

if __name__ == "__main__":
    sys.exit(main())
