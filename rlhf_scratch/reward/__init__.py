"""The reward family: what scores a completion, and the human-feedback half that learns a reward.

    functions     the blog's rewards (sentiment classifier, VADER, character count), normalize_reward
    tasks         --task → a reward function; the reward contract (TRL's keyword one, or the blog's)
    judges        pairwise judges for Online DPO ("AI feedback")
    preferences   preference pairs sampled from the reference, labelled by a gold reward
    model         the Bradley–Terry reward model: its loss, training, and loading as a reward

The commands around them are `python -m rlhf_scratch.preferences` and `python -m rlhf_scratch.reward_model`.
"""
