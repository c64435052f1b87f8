"""PPO's objective on one minibatch, the blog's J = L_clip − ½·c_vf·(V − R)² + c_ent·H[π] − β·KL(π ‖ π_ref)
(`compute_rlhf_objective`); each term is a function of `core.objectives` with its hand-worked test.
"""

from __future__ import annotations

from jaxtyping import Float
from torch import Tensor

from rlhf_scratch.algorithms.ppo.args import RLHFArgs
from rlhf_scratch.core.memory import ReplayMinibatch
from rlhf_scratch.core.objectives import (
    calc_clipped_sur_obj,
    calc_k2_kl,
    calc_value_fn_loss,
    generated_span,
    masked_mean,
)
from rlhf_scratch.core.vocab_terms import Unembedding, token_terms


def compute_rlhf_objective(
    hidden: Float[Tensor, "minibatch seq_len d_model"],
    values: Float[Tensor, "minibatch seq_len"] | None,
    ref_hidden: Float[Tensor, "minibatch gen_len d_ref"] | None,
    mb: ReplayMinibatch,
    args: RLHFArgs,
    beta: float,
    temperature: float,
    unembed: Unembedding,
    ref_unembed: Unembedding,
    chunk_logits: int | None = None,
) -> tuple[Float[Tensor, ""], dict[str, Tensor]]:
    """The PPO objective of one minibatch from the policy's final normalised residual ĥ (and values)
    and the reference's ĥ_ref at the completion's positions:

        J = clipped_surrogate − value_loss + entropy_bonus − kl_penalty

    Every term is taken over the generated span only (position t = prefix_len−1 … seq_len−2
    predicts the completion) and over the kept completion tokens (`mb.completion_mask`). The
    vocabulary-wide quantities — log π(o_t), H[π] and KL(π ‖ π_ref) at each position — come from
    `token_terms`, `chunk_logits` logits at a time (the trainer's carrier passes its own; by default
    `args.logits_per_chunk(device)`; recomputed in backward, not kept); then

        entropy_bonus = c_ent · mean_kept H[π]            (= calc_entropy_bonus on the whole logits)
        kl_penalty    = β · mean_kept KL(π ‖ π_ref)         (= calc_kl_penalty on the whole logits)

    The reference enters through ĥ_ref and, when the rollout kept it, `mb.ref_lse` (then its logits
    are never made: `token_terms(ref_lse=...)`). With `args.kl_estimator == "k2"` the KL is instead
    k2 = ½ (log π(o_t) − log π_ref(o_t))² at the sampled token (`calc_k2_kl`, from `mb.ref_logprobs`;
    `ref_hidden` unused): the same expected gradient, no reference in the vocabulary pass.

    `values=None` (a separate critic, `--critic separate`: it learns on its own, `RLHFTrainer.update_critic`)
    leaves the value term out: J = clipped_surrogate + entropy_bonus − kl_penalty, no `value_loss` in the terms.

    `unembed` / `ref_unembed` map ĥ to logits (`vocab_terms.unembedding` of each model; a test
    passes logits themselves with an identity W_U). Returns J and each term (with its coefficient
    applied, as the functions in `objectives` return them), and the log-probs.

    Every distribution is the sampled one, softmax(z / T) at the rollout's `temperature`
    (`temperature_scaled`, as the rollout scored π_old and π_ref): at T = 1 nothing is divided.
    """
    prefix_len = mb.sample_ids.shape[1] - mb.logprobs.shape[1]
    gen, mask, targets = generated_span(prefix_len), mb.completion_mask, mb.sample_ids[:, prefix_len:]
    full = args.kl_estimator == "full"
    ref = dict(ref_hidden=ref_hidden.flatten(0, 1), ref_unembed=ref_unembed,
               ref_lse=None if mb.ref_lse is None else mb.ref_lse.flatten()) if full else {}
    per_token = token_terms(hidden[:, gen].flatten(0, 1), unembed, targets.flatten(), temperature, with_entropy=True,
                            chunk_logits=args.logits_per_chunk(hidden.device.type) if chunk_logits is None else chunk_logits, **ref).reshape(*targets.shape)
    kl = per_token.kl if full else calc_k2_kl(per_token.logprobs, mb.ref_logprobs)
    terms = {
        "clipped_surrogate": calc_clipped_sur_obj(per_token.logprobs, mb.logprobs, mb.advantages, args.clip_coef, mask=mask),
        **({} if values is None else {"value_loss": calc_value_fn_loss(values[:, gen], mb.returns, args.vf_coef, mask=mask)}),
        "entropy_bonus": args.ent_coef * masked_mean(per_token.entropy, mask),
        "kl_penalty": beta * masked_mean(kl, mask),
        "logprobs": per_token.logprobs,
    }
    total = terms["clipped_surrogate"] - terms.get("value_loss", 0.0) + terms["entropy_bonus"] - terms["kl_penalty"]
    return total, terms
