"""`python -m rlhf_scratch.studies.hacking`: the reward-hacking study (`study.py`)."""

import sys

from rlhf_scratch.studies.hacking.study import main

if __name__ == "__main__":
    sys.exit(main())
