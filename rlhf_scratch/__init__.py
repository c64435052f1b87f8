"""rlhf_scratch: RLHF from scratch on TransformerLens — PPO with a value head (the blog's), RLOO,
Online DPO and GRPO over one rollout; preferences, a Bradley–Terry reward model, over-optimisation.

    from rlhf_scratch import RLHFTrainer, RLHFArgs, get_samples, calc_clipped_sur_obj, ...

The public names below are imported on first use (PEP 562), so `import rlhf_scratch.config`
(and a command line that rejects a bad flag) stays fast: torch is only imported when needed.
"""

import importlib

from rlhf_scratch import registry
from rlhf_scratch.quiet import silence_hooked_transformer_deprecation

silence_hooked_transformer_deprecation()  # we knowingly build on HookedTransformer (see quiet.py)

# public name -> module that defines it
_EXPORTS = {
    # configs
    "CommonArgs": "config", "RLHFArgs": "config", "RLOOArgs": "config", "OnlineDPOArgs": "config",
    "GRPOArgs": "config",
    "make_args": "config",
    # the rollout
    "get_samples": "generation", "sample_next_token": "generation", "Rollout": "rollout", "make_rollout": "rollout",
    "policy_token_log_probs": "rollout", "policy_sequence_log_probs": "rollout",
    # per-token terms over the vocabulary, a chunk of positions at a time (log π, entropy, KL)
    "token_terms": "vocab_terms", "TokenTerms": "vocab_terms", "Unembedding": "vocab_terms",
    "final_hidden": "vocab_terms", "unembedding": "vocab_terms",
    "PromptIterator": "prompts", "load_prompts": "prompts",
    # PPO's pieces, with the blog's names
    "get_log_probs": "objectives", "calc_kl_penalty": "objectives", "calc_entropy_bonus": "objectives",
    "calc_value_fn_loss": "objectives", "calc_clipped_sur_obj": "objectives", "calc_k2_kl": "objectives",
    "compute_advantages": "advantages", "compute_gae_advantages": "advantages",
    "ReplayMemory": "memory", "ReplayMinibatch": "memory",
    "TransformerWithValueHead": "model", "EarlyStopping": "kl_control", "AdaptiveKLController": "kl_control",
    # rewards, models, runs
    "normalize_reward": "reward.functions", "reward_fn_sentiment_imdb": "reward.functions", "reward_fn_vader": "reward.functions",
    "reward_fn_char_count": "reward.functions", "load_lm": "loading", "load_classifier": "loading",
    "load_run": "runs", "load_args": "runs",
    # using a tuned model; judging it with what it was never trained on
    "to_hf_gpt2": "hf_format", "to_hf_causal_lm": "hf_format", "to_hf_gpt_neox": "hf_format",
    "to_hf_llama": "hf_format", "to_hf_qwen2": "hf_format", "to_hf_gemma": "hf_format",
    "build_folder": "model_families", "sample_both": "sample", "heldout_metrics": "heldout",
    # human feedback: preference pairs, a Bradley–Terry reward model, over-optimisation (docs/human-feedback.md)
    "make_preference_pairs": "reward.preferences", "bradley_terry_label": "reward.preferences", "gold_scores": "reward.preferences",
    "calc_reward_model_loss": "reward.model", "reward_model_metrics": "reward.model",
    "RewardModel": "reward.model", "RewardModelArgs": "reward.model", "train_reward_model": "reward.model",
    "load_reward_model_run": "reward.model", "reward_model_classifier": "reward.model", "to_hf_reward_model": "hf_format", "export_reward_model": "export",
    "kl_bon": "studies.overoptimization", "best_of_n_expectation": "studies.overoptimization",
    "fit_gao": "studies.overoptimization",
}
# every algorithm's trainer and formulas, as its registry entry lists them (rlhf_scratch/registry.py)
_EXPORTS.update({name: entry.module.removeprefix("rlhf_scratch.") for entry in registry.ALGORITHMS.values()
                 for name in entry.exports})
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'rlhf_scratch' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"rlhf_scratch.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
