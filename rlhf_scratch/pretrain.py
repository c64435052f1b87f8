"""`python -m rlhf_scratch.pretrain`: rebuild the offline tiny preset (see rlhf_scratch.tiny_preset.pretrain)."""

import sys

from rlhf_scratch.tiny_preset.pretrain import main

if __name__ == "__main__":
    sys.exit(main())
