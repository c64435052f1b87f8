"""rollout: prompts (and the review corpus they come from), sampling (`generation`), and the
rollout phase itself (`phase.make_rollout`: generate, score by the reward-call contract, the
policy's and the reference's log-probs). Imports `models`, `core`, `config`.
"""
