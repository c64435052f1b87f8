"""commands: every command a user runs (`rlhf COMMAND`, main.py). Its documented `python -m` paths
(`python -m rlhf_scratch.train`) are the small files at the top of the package (rlhf_scratch/train.py,
...), each one running a command here. The top layer but those files: it may import anything below it.
"""
