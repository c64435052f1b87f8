"""Peer check: TRL 1.16.0's OWN code against ours, on the same completions, masks and rewards.

trl==1.16.0 is pinned in the `dev` extra (pyproject.toml): a missing or different TRL fails here,
it is never skipped. Nothing reaches the Hub: TRL's trainers are built on the tiny preset exported
with `rlhf_scratch.models.hf_format.to_hf_gpt2`, a local dataset and a reward function that returns fixed,
asymmetric rewards, so every number below is TRL's code running, not a re-typed copy of it.

What is compared (TRL 1.16.0 function ↔ ours, tolerance):

- per-token log-probs at T = 1.0 and 0.7 of a "tuned" policy (the tiny preset with every weight
  perturbed), the `transformers` export vs the HookedTransformer, ≤ 1e-4:
    `trl.trainer.utils.selective_log_softmax` on the HF logits, and the trainers' own scoring path
    `RLOOTrainer._get_per_token_logps_and_entropies` (through `add_fused_lm_head(model, temperature=T)`)
    ↔ `objectives.get_log_probs(logits, tokens, prefix_len, temperature=T)`.
  Left-padded prompts: the trainers' path passes no `position_ids`, so GPT-2 numbers a left-padded
  row from the pad column while we (and `transformers`' own `generate`) number from the first real
  token; `selective_log_softmax` on logits computed with generate's positions matches us.
- RLOO: `RLOOTrainer._generate_and_score_completions` (leave-one-out baseline, sequence-level k1 KL
  folded into the reward, optional whitening) ↔ `compute_kl_shaped_rewards` + `compute_rloo_advantages`
  (+ `normalize_advantages`), ≤ 1e-6 on TRL's own log-probs, ≤ 1e-4 through our models;
  `RLOOTrainer._compute_loss` (sequence ratio, asymmetric clip, mean over sequences) ↔ −`calc_rloo_objective`,
  loss and gradient w.r.t. the per-token log-probs ≤ 1e-6.
- GRPO: `GRPOTrainer._generate_and_score_completions` advantages for scale_rewards group/batch/none ↔
  `compute_grpo_advantages` (≤ 1e-6) and its π_old log-probs ↔ ours (≤ 1e-4);
  `GRPOTrainer._compute_loss` for each of TRL's eight loss types (read from its source) ×
  importance_sampling_level token/sequence × β ∈ {0, 0.04} (k3) ↔ −`calc_grpo_terms`, loss, gradient
  and the step's ratio metrics (clip_ratio/*, low_min, high_max, cispo_clip_ratio, vespo/phi_seq_mean,
  kl) ≤ 1e-6, at TRL's default `use_bias_correction_kl=True` (k3 weighed by the ratio) and, in one
  case, with it False on both sides; `delta`, SAPO's and VESPO's parameters and `entropy_coef` the
  same way; `mask_truncated_completions` on TRL's own generate-and-score output ↔ `loss_mask`.
- Defaults: every field our GRPO, RLOO and Online DPO configs share with TRL's config objects
  (instantiated here) ↔ ours, but for the deliberate differences (DELIBERATE, docs/fidelity.md).
- Online DPO: `trl.experimental.online_dpo.OnlineDPOTrainer.training_step` (pairing, a tie goes to
  the first, masked sums, sigmoid and IPO) ↔ `select_chosen` + `calc_dpo_loss`, loss, implicit rewards
  and gradient ≤ 1e-6; and its whole step on the tiny models ↔ ours ≤ 1e-4 (TRL scores at T = 1
  whatever the sampling temperature: compared at T = 1).
  `trl.trainer.dpo_trainer.DPOTrainer._compute_loss` (offline DPO) sigmoid ↔ `calc_dpo_loss` ≤ 1e-6;
  its IPO divides each log-ratio by the completion length, ours (as TRL's online trainer) does not.
- Reward model: `RewardTrainer.compute_loss` (margin, center_rewards_coefficient) ↔
  `reward_modeling.calc_reward_model_loss`, loss and gradient w.r.t. the rewards ≤ 1e-6; and in eval
  mode (TRL's eval loss) ↔ `evaluate_pairs`' eval/loss.

Where a formula lives only inside a trainer method, a real trainer is built (RLOO, GRPO, Online
DPO) or the unbound method is called on a namespace holding the attributes it reads (DPO,
RewardTrainer, the log-prob path); to feed chosen log-probs to a loss, only the trainer's forward
(`_get_per_token_logps_and_entropies`, `_forward`, `_generate`) is replaced on the instance.
"""

from __future__ import annotations

import contextlib
import types
from collections import defaultdict

import pytest
import torch
import trl
from accelerate import Accelerator
from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer, RLOOConfig, RLOOTrainer
from trl.experimental.online_dpo import OnlineDPOConfig, OnlineDPOTrainer
from trl.trainer.dpo_trainer import DPOTrainer
from trl.trainer.reward_trainer import RewardTrainer
from trl.trainer.utils import FusedCausalLMOutput, add_fused_lm_head, selective_log_softmax

from rlhf_scratch import config
from rlhf_scratch.algorithms.grpo import (
    GRPO_METRICS,
    calc_grpo_objective,
    calc_grpo_terms,
    compute_grpo_advantages,
    loss_mask,
    ratio_metrics,
)
from rlhf_scratch.algorithms.online_dpo import calc_dpo_loss, select_chosen
from rlhf_scratch.algorithms.rloo import (
    calc_rloo_objective,
    compute_kl_shaped_rewards,
    compute_rloo_advantages,
    normalize_advantages,
)
from rlhf_scratch.commands.export import to_hf_gpt2
from rlhf_scratch.config import make_args
from rlhf_scratch.core.objectives import get_log_probs, sequence_log_probs
from rlhf_scratch.models.loading import asset_path, load_lm, load_tokenizer
from rlhf_scratch.reward.model import calc_reward_model_loss
from rlhf_scratch.rollout.generation import attention_mask_or_none, generate, tokenize_prompts

TRL_VERSION = "1.16.0"
EXACT = dict(rtol=0, atol=1e-6)  # the same formula on the same numbers
THROUGH_MODELS = dict(rtol=0, atol=1e-4)  # the same function, computed by two model implementations
# Prompts of 4 tokens each (no padding): TRL's trainers number positions from column 0 (see the docstring).
PROMPTS = ["This movie was really", "A tedious mess that", "The best film of", "I did not expect"]
GEN_LEN = 8


def test_the_pinned_trl_is_installed():
    assert trl.__version__ == TRL_VERSION, f"tests/slow/test_vs_trl.py reads TRL {TRL_VERSION}'s code; found {trl.__version__}"


# --- models ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tuned(one_thread):
    """The tiny preset with every weight perturbed: a stand-in for a tuned policy (HookedTransformer)."""
    policy = load_lm("tiny").eval()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=gen))
    return policy


@pytest.fixture(scope="module")
def reference(one_thread):
    return load_lm("tiny").eval()


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("tiny")


def export_for_trl(tuned, eos: str | None = None):
    """A fresh `transformers` copy of the tuned policy, whose `_name_or_path` is the shipped preset:
    TRL builds its reference model from that folder, so TRL's reference is our `load_lm("tiny")`.
    `eos`: a frequent token made an extra stop token of generation, so TRL's completions end early
    and its completion masks hold zeros."""
    hf = to_hf_gpt2(tuned)
    hf.config._name_or_path = str(asset_path("tiny_lm"))
    if eos is not None:
        hf.generation_config.eos_token_id = load_tokenizer("tiny").convert_tokens_to_ids(eos)
    return hf


@pytest.fixture(scope="module")
def accelerator():
    return Accelerator(cpu=True)


def trl_args(tmp_path_factory, config_cls, **kw):
    return config_cls(output_dir=str(tmp_path_factory.mktemp("trl")), report_to="none", use_cpu=True, bf16=False,
                      gradient_checkpointing=False, disable_dropout=True, save_strategy="no", **kw)


def ours_log_probs(model, ids, prefix_len, temperature, attention_mask=None):
    """Our per-token log-probs of ids[:, prefix_len:] at T, as the rollout computes them."""
    with torch.no_grad():
        logits = model(ids, attention_mask=None if attention_mask is None else attention_mask_or_none(attention_mask))
    return get_log_probs(logits, ids, prefix_len, temperature=temperature)


class FixedRewards:
    """A TRL reward function returning `values` in batch order, whatever the completions."""

    __name__ = "fixed_rewards"

    def __init__(self, values):
        self.values = list(values)

    def __call__(self, prompts, completions, **kwargs):
        assert len(completions) == len(self.values), (len(completions), len(self.values))
        return self.values


# --- per-token log-probs ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def left_padded_batch(tuned):
    """Prompts of 4, 2 and 5 tokens (+BOS), left-padded, with 6 sampled tokens each (ours)."""
    prompts = ["This movie was really", "What a", "The plot is thin and"]
    prompt_ids, prompt_mask = tokenize_prompts(tuned, prompts, prepend_bos=True)
    torch.manual_seed(1)
    completion_ids, completion_mask = generate(tuned, prompt_ids, prompt_mask, 6, temperature=0.7)
    assert not prompt_mask.all(), "the batch must hold left padding"
    return prompt_ids, prompt_mask, completion_ids, completion_mask


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_selective_log_softmax_of_the_export_matches_get_log_probs(tuned, left_padded_batch, temperature):
    """TRL's selective_log_softmax at T on the transformers model's logits = ours on the HookedTransformer,
    left padding included, when the HF forward numbers positions as transformers' `generate` does
    (cumsum(mask) − 1, what TransformerLens does with an attention mask)."""
    prompt_ids, prompt_mask, completion_ids, completion_mask = left_padded_batch
    ids, P = torch.cat([prompt_ids, completion_ids], 1), prompt_ids.shape[1]
    attention = torch.cat([prompt_mask, completion_mask], 1).long()
    hf = to_hf_gpt2(tuned)
    with torch.no_grad():
        logits = hf(ids, attention_mask=attention, position_ids=(attention.cumsum(-1) - 1).clamp(min=0)).logits
    theirs = selective_log_softmax(logits[:, P - 1 : -1], ids[:, P:], temperature=temperature)
    ours = ours_log_probs(tuned, ids, P, temperature, torch.cat([prompt_mask, torch.ones_like(completion_mask)], 1))
    kept = completion_mask
    torch.testing.assert_close(ours[kept], theirs[kept], **THROUGH_MODELS)
    if temperature != 1.0:  # the temperature is applied: T = 1 log-probs are far from these
        at_one = ours_log_probs(tuned, ids, P, 1.0, torch.cat([prompt_mask, torch.ones_like(completion_mask)], 1))
        assert (at_one[kept] - theirs[kept]).abs().max() > 0.1


def trl_scoring_path(hf, ids, attention_mask, logits_to_keep, temperature, accelerator):
    """RLOO/GRPO 1.16's own log-prob path: the fused LM head at T, then `_get_per_token_logps_and_entropies`
    (the unbound method; it reads only `self.accelerator`)."""
    add_fused_lm_head(hf, temperature=temperature)
    trainer = types.SimpleNamespace(accelerator=accelerator)
    with torch.no_grad():
        logps, _, _ = RLOOTrainer._get_per_token_logps_and_entropies(trainer, hf, ids, attention_mask, logits_to_keep)
    return logps


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_the_trainers_fused_log_prob_path_matches_get_log_probs_on_unpadded_rows(tuned, accelerator, temperature):
    """Unpadded prompts, a completion mask with zeros: TRL's trainer path = ours on every kept token."""
    ids = torch.tensor([[0, 718, 398, 683, 956, 14, 13, 336, 0, 0],
                        [0, 33, 3362, 1177, 321, 41, 1395, 425, 1488, 283]])
    P = 5
    completion_mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]])
    attention = torch.cat([torch.ones(2, P, dtype=torch.long), completion_mask], 1)
    theirs = trl_scoring_path(to_hf_gpt2(tuned), ids, attention, ids.shape[1] - P, temperature, accelerator)
    ours = ours_log_probs(tuned, ids, P, temperature)
    kept = completion_mask.bool()
    torch.testing.assert_close(ours[kept], theirs[kept], **THROUGH_MODELS)
    assert (theirs[~kept] == 0).all(), "TRL zeroes the masked positions"


def test_the_trainers_log_prob_path_numbers_left_padded_rows_from_the_pad_column(tuned, left_padded_batch, accelerator):
    """A documented difference (docs/peer-check.md): TRL 1.16's trainers call the model with input_ids
    and attention_mask only, and GPT-2 (learned absolute positions) then gives a left-padded row the
    positions its pad columns push it to, unlike `generate` and us. The unpadded row still matches."""
    prompt_ids, prompt_mask, completion_ids, completion_mask = left_padded_batch
    ids, P = torch.cat([prompt_ids, completion_ids], 1), prompt_ids.shape[1]
    theirs = trl_scoring_path(to_hf_gpt2(tuned), ids, torch.cat([prompt_mask, completion_mask], 1).long(),
                              completion_ids.shape[1], 0.7, accelerator)
    ours = ours_log_probs(tuned, ids, P, 0.7, torch.cat([prompt_mask, torch.ones_like(completion_mask)], 1))
    gap = ((ours - theirs).abs() * completion_mask).amax(dim=1)
    padded = ~prompt_mask.all(dim=1)
    assert (gap[~padded] <= 1e-4).all(), gap
    assert (gap[padded] > 1e-2).all(), f"TRL now numbers left-padded positions as we do ({gap}): update docs/peer-check.md"


# --- RLOO ---------------------------------------------------------------------------------------

RLOO_G = 4
RLOO_REWARDS = [1.0, -0.5, 2.0, 0.25, 0.7, 0.7, 0.7, -1.5]  # group 2: three equal rewards


@pytest.fixture(scope="module")
def rloo_trainer(tuned, tokenizer, tmp_path_factory):
    args = trl_args(tmp_path_factory, RLOOConfig, per_device_train_batch_size=8, num_generations=RLOO_G,
                    max_completion_length=GEN_LEN, temperature=0.7, beta=0.1, epsilon=0.2, epsilon_high=0.28)
    return RLOOTrainer(model=export_for_trl(tuned, eos="."), reward_funcs=FixedRewards(RLOO_REWARDS), args=args,
                       train_dataset=Dataset.from_dict({"prompt": PROMPTS}), processing_class=tokenizer)


@pytest.fixture(scope="module")
def rloo_batches(rloo_trainer):
    """TRL's generate-and-score output for two prompts × G, without and with normalize_advantages."""
    inputs = [{"prompt": p} for p in PROMPTS[:2] for _ in range(RLOO_G)]
    torch.manual_seed(2)
    plain = rloo_trainer._generate_and_score_completions(inputs)
    rloo_trainer.normalize_advantages = True  # what RLOOConfig(normalize_advantages=True) sets in __init__
    try:
        torch.manual_seed(3)
        whitened = rloo_trainer._generate_and_score_completions(inputs)
    finally:
        rloo_trainer.normalize_advantages = False
    return plain, whitened


def trl_per_token_log_probs(trainer, model, batch):
    """TRL's own per-token log-probs of a generated batch (the trainer's scoring path, at its T)."""
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
    attention = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
    with torch.no_grad():
        logps, _, _ = trainer._get_per_token_logps_and_entropies(model, ids, attention, batch["completion_ids"].shape[1])
    return logps


@pytest.mark.parametrize("whiten", [False, True])
def test_rloo_advantages_match_trl_on_trls_own_log_probs(rloo_trainer, rloo_batches, whiten):
    """r_i = R_i − β Σ_t (log π_old − log π_ref), A_i = r_i − mean_{j≠i} r_j (then whitened over the batch)."""
    batch = rloo_batches[whiten]
    mask = batch["completion_mask"].bool()
    assert batch["prompt_mask"].all() and not mask.all(), "unpadded prompts, completions of several lengths"
    old = trl_per_token_log_probs(rloo_trainer, rloo_trainer.model, batch)
    ref = trl_per_token_log_probs(rloo_trainer, rloo_trainer.ref_model, batch)
    torch.testing.assert_close(sequence_log_probs(old, mask), batch["old_logps"], **EXACT)
    shaped = compute_kl_shaped_rewards(torch.tensor(RLOO_REWARDS), old, ref, mask, rloo_trainer.beta)
    advantages = compute_rloo_advantages(shaped, RLOO_G)
    if whiten:
        advantages = normalize_advantages(advantages)
    torch.testing.assert_close(advantages, batch["advantages"], **EXACT)
    if not whiten:  # the KL term moves these advantages: a dropped or flipped β would show
        kl_free = compute_rloo_advantages(torch.tensor(RLOO_REWARDS), RLOO_G)
        assert (kl_free - advantages).abs().max() > 1e-2


def test_rloo_advantages_match_trl_through_our_models(tuned, reference, rloo_trainer, rloo_batches):
    """The same on log-probs from our HookedTransformers at the sampling T (policy and reference)."""
    batch = rloo_batches[0]
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
    P, mask, T = batch["prompt_ids"].shape[1], batch["completion_mask"].bool(), rloo_trainer.temperature
    old = ours_log_probs(tuned, ids, P, T)
    ref = ours_log_probs(reference, ids, P, T)
    torch.testing.assert_close(sequence_log_probs(old, mask), batch["old_logps"], **THROUGH_MODELS)
    shaped = compute_kl_shaped_rewards(torch.tensor(RLOO_REWARDS), old, ref, mask, rloo_trainer.beta)
    torch.testing.assert_close(compute_rloo_advantages(shaped, RLOO_G), batch["advantages"], **THROUGH_MODELS)


def trl_loss_and_grad(trainer, per_token_logps, inputs):
    """TRL's `_compute_loss` on chosen per-token log-probs (its forward replaced on the instance only),
    and the gradient of TRL's loss w.r.t. them."""
    leaf = per_token_logps.clone().requires_grad_(True)
    trainer._get_per_token_logps_and_entropies = lambda *a, **k: (leaf, torch.zeros_like(leaf), None)
    try:
        loss = trainer._compute_loss(trainer.model, inputs)
    finally:
        del trainer._get_per_token_logps_and_entropies
    loss.backward()
    return loss.detach(), leaf.grad


def ours_objective_and_grad(objective_fn, per_token_logps):
    leaf = per_token_logps.clone().requires_grad_(True)
    objective = objective_fn(leaf)
    objective.backward()
    return objective.detach(), leaf.grad


# 4 completions × 5 tokens of lengths 5, 3, 4, 1; old = new − delta, delta chosen per row so the
# SEQUENCE ratios are 1.65 (A > 0: clipped high), 0.90 (A < 0: inside), 0.55 (A > 0: below the
# range but not clipped: moving up is allowed) and 0.61 (A < 0: clipped low).
LOSS_MASK = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 0, 0, 0, 0]])
LOSS_LOGPS = -torch.tensor([[0.3, 1.2, 2.5, 0.7, 1.9], [0.2, 3.1, 0.9, 4.0, 0.6],
                            [1.4, 0.5, 2.2, 0.8, 1.1], [2.7, 0.4, 1.6, 0.9, 3.3]])
LOSS_DELTA = torch.tensor([[0.2, -0.1, 0.3, 0.05, 0.05], [0.1, -0.3, 0.1, 9.0, 9.0],
                           [-0.2, -0.1, -0.2, -0.1, 9.0], [-0.5, 9.0, 9.0, 9.0, 9.0]])  # 9: on padding
LOSS_ADVANTAGES = torch.tensor([1.5, -0.7, 0.3, -2.0])


def completion_inputs(mask, **extra):
    B, L = mask.shape
    return {"prompt_ids": torch.full((B, 3), 5), "prompt_mask": torch.ones(B, 3, dtype=torch.long),
            "completion_ids": torch.full((B, L), 7), "completion_mask": mask, **extra}


def test_rloo_loss_and_gradient_match_trl(rloo_trainer):
    """J = mean_i min(ρ_i A_i, clip(ρ_i, 1−ε_low, 1+ε_high) A_i), ρ_i = exp(Σ_t m (log π − log π_old)) = −TRL's loss."""
    mask = LOSS_MASK.bool()
    old_per_token = LOSS_LOGPS - LOSS_DELTA
    old_seq = sequence_log_probs(old_per_token, mask)
    inputs = completion_inputs(LOSS_MASK, old_logps=old_seq, advantages=LOSS_ADVANTAGES)
    rloo_trainer.model.train()
    trl_loss, trl_grad = trl_loss_and_grad(rloo_trainer, LOSS_LOGPS, inputs)
    eps_low, eps_high = rloo_trainer.epsilon_low, rloo_trainer.epsilon_high
    assert (eps_low, eps_high) == (0.2, 0.28)
    ours, our_grad = ours_objective_and_grad(
        lambda lp: calc_rloo_objective(sequence_log_probs(lp, mask), old_seq, LOSS_ADVANTAGES, eps_low, eps_high),
        LOSS_LOGPS)
    torch.testing.assert_close(ours, -trl_loss, **EXACT)
    torch.testing.assert_close(our_grad, -trl_grad, **EXACT)
    # the case covers both clipped sides and both unclipped ones: rows 0 and 3 get no gradient
    assert (trl_grad[0] == 0).all() and (trl_grad[3] == 0).all() and (trl_grad[1:3][mask[1:3]] != 0).all()


# --- GRPO ---------------------------------------------------------------------------------------

GRPO_G = 4
GRPO_REWARDS = [1.0, -0.5, 2.0, 0.25, 0.7, 0.7, 0.7, 0.7]  # group 2 has no spread: A = 0


@pytest.fixture(scope="module")
def grpo_trainer(tuned, tokenizer, tmp_path_factory):
    """β = 0 (no reference model), two optimizer steps per generation (dapo divides its token count by 2);
    `use_bias_correction_kl` left at TRL's default (True)."""
    args = trl_args(tmp_path_factory, GRPOConfig, per_device_train_batch_size=4, steps_per_generation=2,
                    num_generations=GRPO_G, max_completion_length=GEN_LEN, temperature=0.7, beta=0.0,
                    epsilon=0.2, epsilon_high=0.28)
    trainer = GRPOTrainer(model=export_for_trl(tuned, eos="."), reward_funcs=FixedRewards(GRPO_REWARDS), args=args,
                          train_dataset=Dataset.from_dict({"prompt": PROMPTS}), processing_class=tokenizer)
    trainer.current_gradient_accumulation_steps = 1  # what the HF training loop sets before each step
    return trainer


@contextlib.contextmanager
def trainer_attributes(trainer, **values):
    """Set attributes that a trainer's __init__ copies from its config (restored afterwards)."""
    before = {k: getattr(trainer, k) for k in values}
    for k, v in values.items():
        setattr(trainer, k, v)
    try:
        yield trainer
    finally:
        for k, v in before.items():
            setattr(trainer, k, v)


@pytest.fixture(scope="module")
def grpo_batches(grpo_trainer):
    inputs = [{"prompt": p} for p in PROMPTS[:2] for _ in range(GRPO_G)]
    batches = {}
    for seed, scale in enumerate(["group", "batch", "none"]):
        torch.manual_seed(10 + seed)
        with trainer_attributes(grpo_trainer, scale_rewards=scale):
            batches[scale] = grpo_trainer._generate_and_score_completions(inputs)
    return batches


@pytest.mark.parametrize("scale_rewards", ["group", "batch", "none"])
def test_grpo_advantages_match_trl(grpo_batches, scale_rewards):
    """A_i = (r_i − mean_group r) / (std + 1e-4), std of the group, of the batch, or no division."""
    theirs = grpo_batches[scale_rewards]["advantages"]
    ours = compute_grpo_advantages(torch.tensor(GRPO_REWARDS), GRPO_G, scale_rewards)
    torch.testing.assert_close(ours, theirs, **EXACT)
    assert (theirs[GRPO_G:] == 0).all() and (theirs[:GRPO_G] != 0).all()


def test_grpo_old_log_probs_and_token_count_match_ours(tuned, grpo_trainer, grpo_batches):
    """π_old per token (TRL's fused head at T = 0.7) and dapo's N = kept tokens of the generation batch."""
    batch = grpo_batches["group"]
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
    mask = batch["completion_mask"].bool()
    assert batch["prompt_mask"].all() and not mask.all()
    ours = ours_log_probs(tuned, ids, batch["prompt_ids"].shape[1], grpo_trainer.temperature)
    torch.testing.assert_close(ours[mask], batch["old_per_token_logps"][mask], **THROUGH_MODELS)
    assert batch["num_items_in_batch"].item() == mask.sum().item()


# token-level deltas: a mix of ratios inside the range and outside on both sides
# (9 and 2 on padding: a term that forgot the mask would show)
GRPO_DELTA = torch.tensor([[0.3, -0.1, 0.05, -0.4, 0.2], [0.1, -0.3, 0.4, 9.0, 9.0],
                           [-0.35, 0.25, -0.05, 0.15, 9.0], [-0.5, 9.0, 9.0, 9.0, 9.0]])
GRPO_REF = LOSS_LOGPS + torch.tensor([[0.3, -0.6, 0.1, 0.9, -0.2], [-0.4, 0.2, 0.5, 2.0, 2.0],
                                      [0.7, -0.1, -0.8, 0.2, 2.0], [0.35, 2.0, 2.0, 2.0, 2.0]])
# per-token entropies of π for the entropy bonus (7 on padding)
GRPO_ENTROPY = torch.tensor([[2.1, 0.4, 3.3, 1.2, 0.9], [1.7, 2.6, 0.2, 7.0, 7.0],
                             [0.8, 1.9, 2.4, 0.6, 7.0], [3.1, 7.0, 7.0, 7.0, 7.0]])
GRPO_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo")
# CISPO's ε_max is epsilon_high itself: at the fixture's 0.28 every weight (ρ ≈ 0.6–1.5) would be capped
# alike; at 1.3 the two largest token ratios (1.35, 1.49) are capped and the rest are not
CISPO_EPSILON_MAX = 1.3
CLIP_METRICS = ("clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean", "clip_ratio/low_min",
                "clip_ratio/high_max")


def test_our_grpo_loss_types_are_trls_eight():
    """The loss types TRL 1.16's `_compute_loss` branches on, read from its source, are ours."""
    import inspect
    import re

    source = inspect.getsource(GRPOTrainer._compute_loss)
    named = set()
    for match in re.findall(r'self\.loss_type (?:==|in) (\[[^\]]*\]|"[^"]*")', source):
        named |= set(re.findall(r'"(\w+)"', match))
    assert named == set(GRPO_LOSS_TYPES) == set(config.GRPO_LOSS_TYPES)


def grpo_loss_and_gradient_both_ways(grpo_trainer, loss_type, importance_sampling_level, beta,
                                     use_bias_correction_kl=True, *, advantages=LOSS_ADVANTAGES, epsilon_high=None,
                                     entropy_coef=0.0, **options):
    """TRL's and our numbers on the same inputs with the same settings on both sides: `options` are
    GRPOConfig fields (delta, sapo_*, vespo_*) set on TRL's args and passed to ours by the same name.

    Returns two dicts: loss (TRL's; −J for ours), grad (w.r.t. the per-token log-probs), grad_entropy
    (w.r.t. the entropies, with entropy_coef), and the metrics of that one optimizer step (TRL's
    `_metrics`; ours from `GRPOTerms` through the learning phase's `ratio_metrics`)."""
    mask = LOSS_MASK.bool()
    old = LOSS_LOGPS - GRPO_DELTA
    N = torch.tensor(23.0)  # kept tokens of the whole generation batch (this minibatch holds 13 of them)
    inputs = completion_inputs(LOSS_MASK, advantages=advantages, old_per_token_logps=old,
                               ref_per_token_logps=GRPO_REF, num_items_in_batch=N)
    eps_low = grpo_trainer.epsilon_low
    eps_high = grpo_trainer.epsilon_high if epsilon_high is None else epsilon_high
    assert (eps_low, grpo_trainer.epsilon_high) == (0.2, 0.28)
    assert grpo_trainer.args.steps_per_generation == 2 and grpo_trainer.max_completion_length == GEN_LEN

    grpo_trainer.model.train()
    grpo_trainer._metrics["train"].clear()
    leaf, entropy = LOSS_LOGPS.clone().requires_grad_(True), GRPO_ENTROPY.clone().requires_grad_(True)
    grpo_trainer._get_per_token_logps_and_entropies = lambda *a, **k: (leaf, entropy, None)
    try:
        with trainer_attributes(grpo_trainer, loss_type=loss_type, importance_sampling_level=importance_sampling_level,
                                beta=beta, epsilon_high=eps_high, entropy_coef=entropy_coef,
                                _entropy_bonus_enabled=entropy_coef != 0.0), \
                trainer_attributes(grpo_trainer.args, use_bias_correction_kl=use_bias_correction_kl, **options):
            trl_loss = grpo_trainer._compute_loss(grpo_trainer.model, inputs)
    finally:
        del grpo_trainer._get_per_token_logps_and_entropies
    trl_loss.backward()
    theirs = dict(loss=trl_loss.detach(), grad=leaf.grad, grad_entropy=entropy.grad,
                  metrics={k: v[-1] for k, v in grpo_trainer._metrics["train"].items()})

    our_leaf, our_entropy = LOSS_LOGPS.clone().requires_grad_(True), GRPO_ENTROPY.clone().requires_grad_(True)
    terms = calc_grpo_terms(
        our_leaf, old, advantages, mask, epsilon_low=eps_low, epsilon_high=eps_high, loss_type=loss_type,
        max_completion_length=GEN_LEN, importance_sampling_level=importance_sampling_level,
        ref_logprobs=GRPO_REF if beta else None, beta=beta, num_items_in_batch=N, num_splits=2,
        use_bias_correction_kl=use_bias_correction_kl, entropies=our_entropy, entropy_coef=entropy_coef, **options)
    terms.objective.backward()
    kept = mask.sum().float()
    step = torch.cat([terms.clip_counts, torch.stack([terms.kl_sum, kept, terms.phi_sum, torch.tensor(4.0)])])
    metrics = ratio_metrics(loss_type, step[None], terms.clip_extremes[None, None])
    if beta:
        metrics["kl"] = (terms.kl_sum / kept).item()
    ours = dict(loss=-terms.objective.detach(), grad=-our_leaf.grad,
                grad_entropy=None if our_entropy.grad is None else -our_entropy.grad, metrics=metrics)
    assert (theirs["grad"][~mask] == 0).all() and theirs["grad"].abs().sum() > 0
    return theirs, ours


def assert_same(theirs, ours):
    torch.testing.assert_close(ours["loss"], theirs["loss"], **EXACT)
    torch.testing.assert_close(ours["grad"], theirs["grad"], **EXACT)
    if theirs["grad_entropy"] is not None:
        torch.testing.assert_close(ours["grad_entropy"], theirs["grad_entropy"], **EXACT)
    for name, value in ours["metrics"].items():
        assert theirs["metrics"][name] == pytest.approx(value, abs=1e-6), name


@pytest.mark.parametrize("beta", [0.0, 0.04])
@pytest.mark.parametrize("importance_sampling_level", ["token", "sequence"])
@pytest.mark.parametrize("loss_type", GRPO_LOSS_TYPES)
def test_grpo_loss_and_gradient_match_trl(grpo_trainer, loss_type, importance_sampling_level, beta):
    """Each of TRL's eight loss types at TRL's defaults (at β > 0 each token's k3 weighed by the unclipped,
    differentiable ratio), cispo at ε_max = 1.3; and the step's ratio metrics (clip_ratio/*, cispo_clip_ratio,
    vespo/phi_seq_mean, kl), the same names logged on both sides."""
    assert grpo_trainer.args.use_bias_correction_kl, "TRL's default"
    epsilon_high = CISPO_EPSILON_MAX if loss_type == "cispo" else None
    theirs, ours = grpo_loss_and_gradient_both_ways(grpo_trainer, loss_type, importance_sampling_level, beta,
                                                    epsilon_high=epsilon_high)
    assert_same(theirs, ours)
    logged = {k for k in theirs["metrics"] if k in GRPO_METRICS and k != "entropy"}  # ours is π_old's (docs/grpo.md)
    assert logged == set(ours["metrics"]), "we log the ratio metrics TRL logs for this loss type, and no others"


def test_grpo_loss_without_the_kl_bias_correction_matches_trl(grpo_trainer):
    """use_bias_correction_kl=False on both sides: the plain k3 term; and the flag does change the gradient."""
    theirs, ours = grpo_loss_and_gradient_both_ways(grpo_trainer, "dapo", "token", 0.04, False)
    assert_same(theirs, ours)
    corrected, _ = grpo_loss_and_gradient_both_ways(grpo_trainer, "dapo", "token", 0.04, True)
    assert not torch.allclose(corrected["grad"], theirs["grad"], atol=1e-5), "the case must tell the flag's two values apart"


@pytest.mark.parametrize("delta", [1.4, 1.2])
@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "luspo"])
def test_grpo_two_sided_clipping_delta_matches_trl(grpo_trainer, loss_type, delta):
    """TRL's `delta`: at 1.4 row 1 (A < 0) has a token at ρ = e^0.4 = 1.49 > δ, whose weight is capped at δ;
    at 1.2 (below 1 + ε_high = 1.28, which TRL does not forbid) the A > 0 tokens above 1.2 are capped too, and
    TRL's clip metrics, which read the capped ratio, count no token clipped high."""
    theirs, ours = grpo_loss_and_gradient_both_ways(grpo_trainer, loss_type, "token", 0.04, delta=delta)
    assert_same(theirs, ours)
    without, _ = grpo_loss_and_gradient_both_ways(grpo_trainer, loss_type, "token", 0.04)
    assert (theirs["loss"] - without["loss"]).abs() > 1e-3, "δ must bind in this case"
    if delta < 1.28:
        assert ours["metrics"]["clip_ratio/high_mean"] == 0 < without["metrics"]["clip_ratio/high_mean"]


def test_grpo_sapo_temperatures_match_trl(grpo_trainer):
    """SAPO with τ_pos = 2 and τ_neg = 0.5 (far from the defaults' 1 and 1.05: swapping them shows)."""
    theirs, ours = grpo_loss_and_gradient_both_ways(grpo_trainer, "sapo", "token", 0.0, sapo_temperature_pos=2.0,
                                                    sapo_temperature_neg=0.5)
    assert_same(theirs, ours)
    swapped, _ = grpo_loss_and_gradient_both_ways(grpo_trainer, "sapo", "token", 0.0, sapo_temperature_pos=0.5,
                                                  sapo_temperature_neg=2.0)
    assert (swapped["loss"] - theirs["loss"]).abs() > 1e-3


def test_grpo_vespo_parameters_match_trl(grpo_trainer):
    """VESPO with k and λ away from TRL's defaults, the two signs' values distinct."""
    theirs, ours = grpo_loss_and_gradient_both_ways(grpo_trainer, "vespo", "token", 0.04, vespo_k_pos=1.5,
                                                    vespo_lambda_pos=0.5, vespo_k_neg=4.0, vespo_lambda_neg=6.0)
    assert_same(theirs, ours)


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "luspo"])
def test_grpo_entropy_bonus_matches_trl(grpo_trainer, loss_type):
    """TRL's entropy_coef: loss − c · mean_kept H, the same for every loss type; the gradient w.r.t. H is −c/#kept."""
    theirs, ours = grpo_loss_and_gradient_both_ways(grpo_trainer, loss_type, "token", 0.0, entropy_coef=0.05)
    assert_same(theirs, ours)
    kept = LOSS_MASK.bool()
    torch.testing.assert_close(theirs["grad_entropy"], torch.where(kept, -0.05 / 13, 0.0), **EXACT)


@pytest.mark.parametrize("sign", [1.0, -1.0], ids=["mixed-advantages", "every-advantage-negated"])
@pytest.mark.parametrize("importance_sampling_level", ["token", "sequence"])
def test_grpo_clip_ratio_min_and_max_match_trl(grpo_trainer, sign, importance_sampling_level):
    """clip_ratio/low_min and high_max: the extreme per-sequence clipped fractions. With mixed signs
    low_min is 0 (a row with A > 0 is never clipped low) and high_max is row 2's 1/4 (token level);
    with every advantage negated no row has A > 0 and low_min is the smallest row's low fraction (1/5)."""
    advantages = sign * LOSS_ADVANTAGES.abs() if sign < 0 else LOSS_ADVANTAGES
    theirs, ours = grpo_loss_and_gradient_both_ways(grpo_trainer, "dapo", importance_sampling_level, 0.0,
                                                    advantages=advantages)
    assert_same(theirs, ours)
    assert set(CLIP_METRICS) <= set(ours["metrics"])
    if importance_sampling_level == "token":
        expected = (0.0, 0.25) if sign > 0 else (0.2, 0.0)
        assert (ours["metrics"]["clip_ratio/low_min"], ours["metrics"]["clip_ratio/high_max"]) == pytest.approx(expected)


@pytest.fixture(scope="module")
def truncated_batch(grpo_trainer):
    """TRL's generate-and-score with mask_truncated_completions on: rows without an EOS (TRL's eos ids:
    the tokenizer's and the extra ".") are cut from the completion mask and from num_items_in_batch."""
    inputs = [{"prompt": p} for p in PROMPTS[:2] for _ in range(GRPO_G)]
    torch.manual_seed(35)  # rows 4 and 6 run to GEN_LEN without an EOS
    with trainer_attributes(grpo_trainer, mask_truncated_completions=True):
        return grpo_trainer._generate_and_score_completions(inputs)


@pytest.mark.parametrize("loss_type", ["dapo", "grpo"])
def test_mask_truncated_completions_masks_as_trl(grpo_trainer, truncated_batch, loss_type):
    """Our `loss_mask` on TRL's completions = TRL's completion mask, and its N = our count; then the loss
    of a step on that batch (dapo, and grpo whose B still counts the masked rows) equals TRL's."""
    batch = truncated_batch
    ids = batch["completion_ids"]
    is_eos = torch.isin(ids, torch.tensor(grpo_trainer.eos_token_ids))
    completion_mask = (is_eos.cumsum(-1) - is_eos.long()) == 0  # up to and including the first EOS
    terminated = (is_eos & completion_mask).any(-1)
    assert terminated.any() and not terminated.all(), "the case needs both ended and truncated completions"
    mask = loss_mask(completion_mask, terminated, mask_truncated_completions=True)
    assert torch.equal(mask, batch["completion_mask"].bool())
    assert batch["num_items_in_batch"].item() == mask.sum().item()
    assert not torch.equal(loss_mask(completion_mask, terminated, False), mask)

    old = batch["old_per_token_logps"]
    now = old + 0.3 * torch.sin(torch.arange(old.numel(), dtype=old.dtype)).view_as(old)  # ratios on both sides
    advantages = torch.tensor([1.5, -0.7, 0.3, -2.0, 0.8, -1.1, 0.4, -0.6])  # non-zero: a masked row would move
    grpo_trainer.model.train()
    with trainer_attributes(grpo_trainer, loss_type=loss_type):
        trl_loss, trl_grad = trl_loss_and_grad(grpo_trainer, now, {**batch, "advantages": advantages})
    ours, our_grad = ours_objective_and_grad(
        lambda lp: calc_grpo_objective(lp, old, advantages, mask, epsilon_low=0.2, epsilon_high=0.28,
                                       loss_type=loss_type, max_completion_length=GEN_LEN,
                                       num_items_in_batch=mask.sum(), num_splits=2), now)
    torch.testing.assert_close(-ours, trl_loss, **EXACT)
    torch.testing.assert_close(-our_grad, trl_grad, **EXACT)
    assert (trl_grad[~terminated] == 0).all() and (trl_grad[terminated] != 0).any(), \
        "a truncated completion gets no gradient, the others do"


# --- defaults -------------------------------------------------------------------------------------

# Our defaults that differ from TRL's config objects on purpose (each explained where it is defined):
DELIBERATE = {
    "seed": "any seed; ours is 1",
    "bf16": "ours runs on a CPU first (docs/speed.md); TRL's default is True",
    "warmup_steps": "ours counts phases, TRL optimizer steps",
    "steps_per_generation": "None here = num_minibatches (4 off-policy steps per rollout); TRL's resolves to 1",
    "num_generations@rloo": "RLOO's G = 4, not 2: a lower-variance baseline at the same batch (docs/fidelity.md)",
}


@pytest.mark.parametrize("algo, config_cls", [("grpo", GRPOConfig), ("rloo", RLOOConfig),
                                               ("online_dpo", OnlineDPOConfig)])
def test_defaults_are_trls(tmp_path, algo, config_cls):
    """Every field our config shares with TRL's (by name, and ε_low = TRL's `epsilon`) has TRL's default,
    read from TRL's own config object, except the DELIBERATE differences."""
    import dataclasses

    ours = make_args("tiny", algo)
    theirs = config_cls(output_dir=str(tmp_path), report_to="none", use_cpu=True)
    shared = {f.name for f in dataclasses.fields(ours)} & {f.name for f in dataclasses.fields(theirs)}
    trl_value = {name: getattr(theirs, name) for name in shared}
    if hasattr(ours, "epsilon_low"):
        trl_value["epsilon_low"] = theirs.epsilon
        trl_value["epsilon_high"] = theirs.epsilon if theirs.epsilon_high is None else theirs.epsilon_high  # TRL: None = ε
    checked = []
    for name, value in trl_value.items():
        if name in DELIBERATE or f"{name}@{algo}" in DELIBERATE:
            assert getattr(ours, name) != value, f"{name} is TRL's default now: drop it from DELIBERATE"
            continue
        assert getattr(ours, name) == value, f"{algo}.{name}: ours {getattr(ours, name)!r}, TRL's {value!r}"
        checked.append(name)
    assert {"beta", "temperature", "top_k", "top_p", "epsilon_low"} <= set(checked) or algo == "online_dpo"
    if algo == "grpo":
        assert theirs.steps_per_generation == theirs.gradient_accumulation_steps == 1, "TRL: one step per generation"
        assert {"loss_type", "delta", "mask_truncated_completions", "entropy_coef", "sapo_temperature_neg",
                "vespo_lambda_neg", "use_bias_correction_kl"} <= set(checked)


# --- Online DPO -----------------------------------------------------------------------------------

DPO_PAIRS = 3
# TRL's layout: rows i and i + pairs are the two completions of prompt i. Pair 0: the second wins;
# pair 1: a tie (the first is chosen, in TRL and in ours); pair 2: the first wins.
DPO_REWARDS = [0.2, 1.5, 3.0, 0.9, 1.5, -1.0]
DPO_MASK = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1], [1, 1, 1, 0]])
DPO_LOGPS = -torch.tensor([[0.5, 1.1, 0.3, 2.0], [1.7, 0.2, 5.0, 5.0], [0.9, 0.4, 1.3, 5.0],
                           [0.6, 5.0, 5.0, 5.0], [1.2, 0.8, 0.1, 0.7], [0.3, 2.2, 0.5, 5.0]])
DPO_REF = DPO_LOGPS + torch.tensor([[0.4, -0.2, 0.1, 0.3], [-0.5, 0.6, 1.0, 1.0], [0.2, 0.2, -0.7, 1.0],
                                    [0.9, 1.0, 1.0, 1.0], [-0.3, 0.1, 0.4, -0.6], [0.5, -0.2, 0.3, 1.0]])


@pytest.fixture(scope="module")
def online_dpo_trainer(tuned, reference, tokenizer, tmp_path_factory):
    """TRL's (experimental) OnlineDPOTrainer, β = 0.1, sampling at T = 0.7; its reference is the preset."""
    args = trl_args(tmp_path_factory, OnlineDPOConfig, per_device_train_batch_size=DPO_PAIRS,
                    max_new_tokens=GEN_LEN, temperature=0.7, beta=0.1)
    ref = to_hf_gpt2(reference)
    return OnlineDPOTrainer(model=export_for_trl(tuned, eos="."), ref_model=ref,
                            reward_funcs=FixedRewards(DPO_REWARDS), args=args,
                            train_dataset=Dataset.from_dict({"prompt": PROMPTS}), processing_class=tokenizer)


def ours_pair_order(pairs):
    """TRL's rows (i, i + pairs) → ours (2i, 2i + 1): the index list that reorders TRL's rows."""
    return torch.stack([torch.arange(pairs), torch.arange(pairs) + pairs], 1).flatten()


@pytest.mark.parametrize("loss_type", ["sigmoid", "ipo"])
def test_online_dpo_loss_and_gradient_match_trl(online_dpo_trainer, loss_type):
    trainer, B = online_dpo_trainer, DPO_PAIRS
    leaf = DPO_LOGPS.clone().requires_grad_(True)
    completion_ids = torch.where(DPO_MASK.bool(), torch.tensor(7), torch.tensor(0))
    completion_ids[torch.arange(2 * B), DPO_MASK.sum(1) - 1] = 14  # each ends with the extra EOS "."
    trainer._generate = lambda model, prompts, images=None: (
        torch.full((2 * B, 3), 5), torch.ones(2 * B, 3, dtype=torch.long), completion_ids, DPO_MASK, None)
    trainer._forward = lambda model, *a, **k: DPO_REF if model is trainer.ref_model else leaf
    trainer.stats = defaultdict(list)
    try:
        with trainer_attributes(trainer.args, loss_type=loss_type):
            trl_loss = trainer.training_step(trainer.model, {"prompt": PROMPTS[:B]})
    finally:
        del trainer._generate, trainer._forward

    order, mask = ours_pair_order(B), DPO_MASK.bool()
    chosen, rejected = select_chosen(torch.tensor(DPO_REWARDS)[order])
    assert chosen.tolist() == [1, 2, 4] and rejected.tolist() == [0, 3, 5]  # 2nd wins, tie → 1st, 1st wins
    ref = sequence_log_probs(DPO_REF[order], mask[order])

    def ours(lp):
        seq = sequence_log_probs(lp[order], mask[order])
        return calc_dpo_loss(seq[chosen], seq[rejected], ref[chosen], ref[rejected], trainer.beta, loss_type)

    our_leaf = DPO_LOGPS.clone().requires_grad_(True)
    out = ours(our_leaf)
    out.loss.backward()
    torch.testing.assert_close(out.loss.detach(), trl_loss, **EXACT)
    torch.testing.assert_close(our_leaf.grad, leaf.grad, **EXACT)
    assert (leaf.grad[~mask] == 0).all() and (leaf.grad[mask] != 0).all()
    torch.testing.assert_close(out.chosen_rewards.mean().item(), trainer.stats["rewards/chosen"][0], **EXACT)
    torch.testing.assert_close(out.rejected_rewards.mean().item(), trainer.stats["rewards/rejected"][0], **EXACT)


def test_online_dpo_step_on_the_tiny_models_matches_ours_at_temperature_one(tuned, reference, online_dpo_trainer):
    """TRL's whole step (generate at T = 0.7, score, pick, loss) on its models = ours on our models for
    the same completions — with OUR log-probs taken at T = 1, as TRL's `_forward` takes them (no
    division by T: a documented difference, ours scores at the sampling temperature)."""
    trainer, B = online_dpo_trainer, DPO_PAIRS
    recorded = []
    real_generate = trainer._generate
    trainer._generate = lambda *a, **k: recorded.append(real_generate(*a, **k)) or recorded[-1]
    trainer.stats = defaultdict(list)
    try:
        torch.manual_seed(4)
        trl_loss = trainer.training_step(trainer.model, {"prompt": PROMPTS[:B]})
    finally:
        del trainer._generate
        trainer.model.zero_grad(set_to_none=True)
    prompt_ids, prompt_mask, completion_ids, completion_mask, _ = recorded[0]
    assert prompt_mask.all() and not completion_mask.all()
    ids, P = torch.cat([prompt_ids, completion_ids], 1), prompt_ids.shape[1]
    order, mask = ours_pair_order(B), completion_mask.bool()
    def seq(model, T):
        return sequence_log_probs(ours_log_probs(model, ids, P, T), mask)[order]

    chosen, rejected = select_chosen(torch.tensor(DPO_REWARDS)[order])
    pi, ref = seq(tuned, 1.0), seq(reference, 1.0)
    ours = calc_dpo_loss(pi[chosen], pi[rejected], ref[chosen], ref[rejected], trainer.beta).loss
    torch.testing.assert_close(ours, trl_loss, **THROUGH_MODELS)
    pi_T, ref_T = seq(tuned, 0.7), seq(reference, 0.7)
    at_T = calc_dpo_loss(pi_T[chosen], pi_T[rejected], ref_T[chosen], ref_T[rejected], trainer.beta).loss
    assert (at_T - trl_loss).abs() > 1e-3, "TRL's online DPO now scores at the sampling T: update docs/peer-check.md"


def test_offline_dpo_sigmoid_loss_matches_trl_dpo_trainer(accelerator):
    """DPOTrainer._compute_loss (precomputed reference log-probs, loss_type sigmoid) on summed masked
    log-probs = calc_dpo_loss; the model's forward returns our per-token log-probs (fused-head output)."""
    B = DPO_PAIRS
    # DPOTrainer's layout: rows [chosen; rejected]; its log-probs have one position less than input_ids
    shifted_mask = DPO_MASK
    leaf = (DPO_LOGPS * shifted_mask).clone().requires_grad_(True)  # the fused head zeroes label -100
    completion_mask = torch.cat([torch.zeros(2 * B, 1, dtype=torch.long), shifted_mask], 1)
    input_ids = torch.full_like(completion_mask, 7)
    zeros = torch.zeros_like(leaf)

    def model(**kwargs):
        return FusedCausalLMOutput(log_probs=leaf, entropy=zeros, mean_logits=zeros, is_top1=zeros.bool())

    ref_seq = sequence_log_probs(DPO_REF, DPO_MASK.bool())
    trainer = types.SimpleNamespace(
        model=types.SimpleNamespace(training=False), accelerator=accelerator, aux_loss_enabled=False, ld_alpha=None,
        precompute_ref_logps=True, f_divergence_type="reverse_kl", loss_types=["sigmoid"], loss_weights=[1.0],
        beta=0.1, use_weighting=False, _metrics={"eval": defaultdict(list)}, _total_train_tokens=0,
    )
    inputs = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids), "completion_mask": completion_mask,
              "ref_chosen_logps": ref_seq[:B], "ref_rejected_logps": ref_seq[B:]}
    trl_loss = DPOTrainer._compute_loss(trainer, model, inputs, return_outputs=False)
    trl_loss.backward()

    our_leaf = DPO_LOGPS.clone().requires_grad_(True)
    seq = sequence_log_probs(our_leaf, DPO_MASK.bool())
    ours = calc_dpo_loss(seq[:B], seq[B:], ref_seq[:B], ref_seq[B:], 0.1, "sigmoid").loss
    ours.backward()
    torch.testing.assert_close(ours.detach(), trl_loss.detach(), **EXACT)
    # TRL sums every position (the fused head has zeroed the masked ones): compare where it is kept
    torch.testing.assert_close(our_leaf.grad * shifted_mask, leaf.grad * shifted_mask, **EXACT)
    assert (our_leaf.grad[~DPO_MASK.bool()] == 0).all()


# --- reward model -------------------------------------------------------------------------------

RM_CHOSEN = torch.tensor([1.2, -0.3, 0.8, 2.5])
RM_REJECTED = torch.tensor([0.4, 0.9, -1.1, 2.6])
RM_MARGIN = torch.tensor([0.5, 0.0, 1.0, 0.25])


@pytest.mark.parametrize("center", [None, 0.01])
@pytest.mark.parametrize("margin", [None, RM_MARGIN], ids=["no-margin", "margin"])
def test_reward_model_loss_and_gradient_match_trl(accelerator, margin, center):
    """RewardTrainer.compute_loss: −log σ(r_c − r_r − m) averaged, + c · mean (r_c + r_r)²."""
    leaf = torch.cat([RM_CHOSEN, RM_REJECTED]).requires_grad_(True)  # TRL's batch: [chosen; rejected]
    trainer = types.SimpleNamespace(
        model=types.SimpleNamespace(training=False), accelerator=accelerator,
        args=types.SimpleNamespace(center_rewards_coefficient=center),
        _metrics={"eval": defaultdict(list)}, _total_train_tokens=0,
    )
    inputs = {"input_ids": torch.ones(8, 3, dtype=torch.long), "attention_mask": torch.ones(8, 3, dtype=torch.long)}
    if margin is not None:
        inputs["margin"] = margin
    trl_loss = RewardTrainer.compute_loss(trainer, lambda **kw: types.SimpleNamespace(logits=leaf[:, None]), inputs)
    trl_loss.backward()

    chosen, rejected = RM_CHOSEN.clone().requires_grad_(True), RM_REJECTED.clone().requires_grad_(True)
    ours = calc_reward_model_loss(chosen, rejected, margin=margin, center_rewards_coefficient=center)
    ours.backward()
    torch.testing.assert_close(ours.detach(), trl_loss.detach(), **EXACT)
    torch.testing.assert_close(torch.cat([chosen.grad, rejected.grad]), leaf.grad, **EXACT)


RM_ROWS = [{"prompt": "The film was ", "chosen": "great fun.", "rejected": "a bore.", "margin": 1.5},
           {"prompt": "Its plot ", "chosen": "never drags.", "rejected": "goes nowhere.", "margin": 0.0},
           {"prompt": "", "chosen": "A moving story", "rejected": "A mess", "margin": 0.75}]


@pytest.mark.parametrize("center", [None, 0.01])
def test_reward_model_eval_loss_is_trls_eval_loss(accelerator, reference, center):
    """TRL evaluates a reward model with the training `compute_loss` (margin and centring term
    included): `evaluate_pairs`' eval/loss on rows with margins = TRL's loss on the same rewards in eval mode."""
    from rlhf_scratch.reward.model import RewardModel, evaluate_pairs, pair_texts

    torch.manual_seed(0)
    model = RewardModel(reference).eval()  # (evaluate_pairs puts back the mode it found: the shared reference stays in eval)
    with torch.no_grad():
        model.score.bias.fill_(0.5)  # rewards away from 0: the centring term is not negligible
    got = evaluate_pairs(model, RM_ROWS, center_rewards_coefficient=center)
    chosen, rejected = pair_texts(RM_ROWS)
    rewards = torch.cat([model.score_texts(chosen), model.score_texts(rejected)])
    trainer = types.SimpleNamespace(
        model=types.SimpleNamespace(training=False), accelerator=accelerator,
        args=types.SimpleNamespace(center_rewards_coefficient=center),
        _metrics={"eval": defaultdict(list)}, _total_train_tokens=0,
    )
    inputs = {"input_ids": torch.ones(6, 3, dtype=torch.long), "attention_mask": torch.ones(6, 3, dtype=torch.long),
              "margin": torch.tensor([r["margin"] for r in RM_ROWS])}
    trl_loss = RewardTrainer.compute_loss(trainer, lambda **kw: types.SimpleNamespace(logits=rewards[:, None]), inputs)
    assert got["eval/loss"] == pytest.approx(trl_loss.item(), abs=1e-6)
    plain = calc_reward_model_loss(rewards[:3], rewards[3:]).item()
    assert abs(got["eval/loss"] - plain) > 1e-3, "the margins (and the centring term) must count in this case"
