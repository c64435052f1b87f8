"""commands: every `python -m` entry point (the old paths, `python -m rlhf_scratch.train`, stay
as aliases: rlhf_scratch/_aliases.py). The top layer: it may import anything below it.
"""
