"""The reward family: what scores a completion, and the human-feedback half that learns a reward.

    functions     the blog's rewards (sentiment classifier, VADER, character count), normalize_reward
    tasks         --task → a reward function; the reward contract (TRL's keyword one, or the blog's)
    judges        pairwise judges for Online DPO ("AI feedback")
    preferences   preference pairs sampled from the reference, labelled by a gold reward
    model         the Bradley–Terry reward model: its loss, training, and loading as a reward
    arithmetic    problems with an exact answer (47+85= / 132) and a settable difficulty; verl's rows
    verifiable    rule rewards as TRL writes them: accuracy_reward, format_reward (how an answer is parsed)
    pass_at_k     Chen et al.'s unbiased pass@k, per problem and over a benchmark

The commands around them are `python -m rlhf_scratch.preferences`, `python -m rlhf_scratch.reward_model`
and `rlhf data arithmetic` (docs/verifiable.md).
"""
