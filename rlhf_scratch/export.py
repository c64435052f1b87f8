"""`python -m rlhf_scratch.export` (= `rlhf export`): a run as a Hugging Face model folder.

A documented command path, kept as a file; the command lives in rlhf_scratch/commands/export.py.
"""

import sys

from rlhf_scratch.commands.export import main

if __name__ == "__main__":
    sys.exit(main())
