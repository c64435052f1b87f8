"""`python -m rlhf_scratch.overoptimization`: reward-model over-optimisation. The study lives in
`rlhf_scratch.studies.overoptimization`; this name keeps the documented command."""

import sys

from rlhf_scratch.studies.overoptimization import main

if __name__ == "__main__":
    sys.exit(main())
