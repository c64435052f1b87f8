"""`python -m rlhf_scratch.compare`: the algorithms side by side. The study lives in
`rlhf_scratch.studies.compare`; this name keeps the documented command."""

import sys

from rlhf_scratch.studies.compare import main

if __name__ == "__main__":
    sys.exit(main())
