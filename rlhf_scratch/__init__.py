"""rlhf_scratch: RLHF from scratch on TransformerLens — PPO with a value head (the blog's), RLOO,
Online DPO and GRPO over one rollout; preferences, a Bradley–Terry reward model, over-optimisation.

    from rlhf_scratch import RLHFTrainer, RLHFArgs, get_samples, calc_clipped_sur_obj, ...

The public names below are imported on first use (PEP 562), so `import rlhf_scratch.config`
(and a command line that rejects a bad flag) stays fast: torch is only imported when needed.
"""

import importlib

from rlhf_scratch.config import registry
from rlhf_scratch.core.quiet import silence_hooked_transformer_deprecation

silence_hooked_transformer_deprecation()  # we knowingly build on HookedTransformer (see quiet.py)

# public name -> module that defines it
_EXPORTS = {
    # configs (each algorithm's own below, from the registry)
    "CommonArgs": "config", "make_args": "config",
    # the rollout
    "get_samples": "rollout.generation", "sample_next_token": "rollout.generation", "Rollout": "rollout.phase", "make_rollout": "rollout.phase",
    "policy_token_log_probs": "rollout.phase", "policy_sequence_log_probs": "rollout.phase",
    # per-token terms over the vocabulary, a chunk of positions at a time (log π, entropy, KL)
    "token_terms": "core.vocab_terms", "TokenTerms": "core.vocab_terms", "Unembedding": "core.vocab_terms",
    "final_hidden": "models.fast_forward", "unembedding": "core.vocab_terms",
    "PromptIterator": "rollout.prompts", "load_prompts": "rollout.prompts",
    # PPO's pieces, with the blog's names
    "get_log_probs": "core.objectives", "calc_kl_penalty": "core.objectives", "calc_entropy_bonus": "core.objectives",
    "calc_value_fn_loss": "core.objectives", "calc_clipped_sur_obj": "core.objectives", "calc_k2_kl": "core.objectives",
    "compute_advantages": "core.advantages", "compute_gae_advantages": "core.advantages",
    "ReplayMemory": "core.memory", "ReplayMinibatch": "core.memory",
    "EarlyStopping": "core.kl_control", "AdaptiveKLController": "core.kl_control",
    # rewards, models, runs
    "normalize_reward": "reward.functions", "reward_fn_sentiment_imdb": "reward.functions", "reward_fn_vader": "reward.functions",
    "reward_fn_char_count": "reward.functions", "load_lm": "models.loading", "load_classifier": "models.loading",
    "load_run": "engine.runs", "load_args": "engine.runs",
    # using a tuned model; judging it with what it was never trained on
    "to_hf_gpt2": "models.hf_format", "to_hf_causal_lm": "models.hf_format", "to_hf_gpt_neox": "models.hf_format",
    "to_hf_llama": "models.hf_format", "to_hf_qwen2": "models.hf_format", "to_hf_gemma": "models.hf_format",
    "build_folder": "models.families", "sample_both": "commands.sample", "heldout_metrics": "reward.heldout",
    # human feedback: preference pairs, a Bradley–Terry reward model, over-optimisation (docs/human-feedback.md)
    "make_preference_pairs": "reward.preferences", "bradley_terry_label": "reward.preferences", "gold_scores": "reward.preferences",
    "calc_reward_model_loss": "reward.model", "reward_model_metrics": "reward.model",
    "RewardModel": "reward.model", "RewardModelArgs": "reward.model", "train_reward_model": "engine.reward_model",
    "load_reward_model_run": "reward.model", "reward_model_classifier": "reward.model", "to_hf_reward_model": "models.hf_format", "export_reward_model": "commands.export",
    "kl_bon": "studies.overoptimization", "best_of_n_expectation": "studies.overoptimization",
    "fit_gao": "studies.overoptimization",
    # verifiable rewards (docs/verifiable.md): the rule, the metric, the problems
    "pass_at_k": "reward.pass_at_k", "mean_pass_at_k": "reward.pass_at_k", "accuracy_reward": "reward.verifiable",
    "format_reward": "reward.verifiable", "make_problems": "reward.arithmetic", "verifiable_metrics": "reward.verifiable_eval",
}
# every algorithm's args class, trainer and formulas, as its registry entry names them (rlhf_scratch/config/registry.py)
_EXPORTS.update({name: entry.module.removeprefix("rlhf_scratch.") for entry in registry.ALGORITHMS.values()
                 for name in entry.exports})
_EXPORTS.update({entry.args.partition(":")[2]: entry.args_module.removeprefix("rlhf_scratch.")
                 for entry in registry.ALGORITHMS.values() if isinstance(entry.args, str)})
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'rlhf_scratch' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"rlhf_scratch.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
