"""`python -m rlhf_scratch.course progress`: every check on the learner's notebooks (course/progress.py)."""

import sys

from rlhf_scratch.course.progress import main

sys.exit(main())
