"""`python -m rlhf_scratch.pretrain`: rebuild the offline tiny preset (see rlhf_scratch.commands.tiny_preset.build)."""

import sys

from rlhf_scratch.commands.tiny_preset.build import main

if __name__ == "__main__":
    sys.exit(main())
