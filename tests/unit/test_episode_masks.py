"""Issue 58, item 3: every term of every algorithm counts the model's tokens only, on one two-turn
episode worked by hand. The tool's reply sits in the middle with numbers far from the model's, so
training on it, counting it in the KL, the entropy or the length, or stepping GAE through it, gives a
different number — and each test first checks that it would. GRPO (its length normalisations, k3 KL, entropy
bonus), RLOO (log π(o|q), the KL-shaped reward), PPO (one-step and GAE advantages, the value loss, the clipped
surrogate's normalisation and mean) and Online DPO (the pair's loss, its logged KL and entropy).

    position      0       1        2     3     4       5
    author        model   model    env   env   model   model        gen_len 6, prompt_len 2
    mask          T       T        F     F     T       T            |o| = 4 model tokens
"""

import math

import pytest
import torch

from rlhf_scratch.algorithms.grpo.loss import aggregate_grpo_terms, calc_grpo_terms
from rlhf_scratch.algorithms.online_dpo.loss import calc_dpo_loss, rollout_objective_stats
from rlhf_scratch.algorithms.rloo.objective import compute_kl_shaped_rewards
from rlhf_scratch.core.advantages import compute_advantages, compute_gae_advantages, last_kept, next_kept_values
from rlhf_scratch.core.objectives import calc_clipped_sur_obj, calc_value_fn_loss, masked_mean, sequence_log_probs
from rlhf_scratch.rollout.episodes import Episode, Segment, assemble_completions
from rlhf_scratch.rollout.phase import Rollout

MASK = torch.tensor([[True, True, False, False, True, True]])
EVERY = torch.ones_like(MASK)


def test_the_episode_assembles_into_the_mask_worked_above():
    episode = Episode([Segment((5, 6), True), Segment((7, 8), False), Segment((9, 0), True)])
    ids, mask = assemble_completions([episode, Episode([Segment((3,), True)])], gen_len=7, pad=0)
    assert ids.tolist() == [[5, 6, 7, 8, 9, 0, 0], [3, 0, 0, 0, 0, 0, 0]]
    assert mask.tolist() == [[True, True, False, False, True, True, False], [True] + [False] * 6]
    assert (episode.model_tokens, episode.env_tokens, episode.last_turn) == (4, 2, (9, 0))
    with pytest.raises(ValueError, match="episode 0 has 6 tokens, more than gen_len 5"):
        assemble_completions([episode], gen_len=5, pad=0)


def test_the_sequence_log_prob_sums_the_model_tokens_only():
    logprobs = torch.tensor([[-1.0, -2.0, -9.0, -9.0, -0.5, -0.25]])
    # -1 - 2 - 0.5 - 0.25 = -3.75; the tool's reply would add -18
    assert sequence_log_probs(logprobs, EVERY).item() == -21.75  # the data can tell
    assert sequence_log_probs(logprobs, MASK).item() == -3.75, "log π(o|q) summed the tool's reply (-21.75 is with it)"


def test_grpo_length_normalisation_counts_the_model_tokens():
    terms = torch.tensor([[1.0, 2.0, 100.0, 100.0, 3.0, 4.0]])
    # "grpo": (1 + 2 + 3 + 4) / |o| = 10 / 4 = 2.5; trained on the reply: 210 / 6 = 35; its length counted: 10 / 6
    assert aggregate_grpo_terms(terms, EVERY, "grpo", 6).item() == 35.0
    got = aggregate_grpo_terms(terms, MASK, "grpo", 6).item()
    assert got != pytest.approx(10 / 6), "the length |o| counted the tool's tokens: 10 / 6"
    assert got == 2.5
    # "dapo" (and bnpo): the kept-token count is 4 -> 10 / 4; "dr_grpo": a constant B·L = 1·6 whatever the mask -> 10 / 6
    assert aggregate_grpo_terms(terms, MASK, "dapo", 6).item() == 2.5
    assert aggregate_grpo_terms(terms, MASK, "dr_grpo", 6).item() == pytest.approx(10 / 6)
    # "luspo": the sequence's sum over the model's tokens, 10
    assert aggregate_grpo_terms(terms, MASK, "luspo", 6).item() == 10.0


def test_grpo_k3_kl_and_entropy_bonus_count_the_model_tokens():
    lp = torch.tensor([[-1.0, -2.0, -9.0, -9.0, -0.5, -0.25]])
    ref = torch.tensor([[-1.0, -2.0, -0.1, -0.1, -0.5, -0.25]])  # = π on the model's tokens: k3 = 0 there
    entropy = torch.tensor([[0.2, 0.4, 3.0, 3.0, 0.6, 0.8]])
    zero_adv = torch.zeros(1)

    def objective(mask, **kw):
        return calc_grpo_terms(lp, lp, zero_adv, mask, epsilon_low=0.2, epsilon_high=0.2, loss_type="grpo",
                               max_completion_length=6, ref_logprobs=ref, **kw).objective.item()

    # ρ = 1 and A = 0: J = −β Σ k3 / |o| + c · mean H. On the model's tokens k3 = 0 and mean H = (0.2+0.4+0.6+0.8)/4 = 0.5
    assert objective(EVERY, beta=0.1) < -0.1  # the data can tell: k3 at the reply is e^8.9 − 8.9 − 1 each
    assert objective(MASK, beta=0.1) == 0.0, "the KL counted the tool's tokens"
    assert objective(EVERY, entropies=entropy, entropy_coef=1.0) == pytest.approx(8.0 / 6.0)
    assert objective(MASK, entropies=entropy, entropy_coef=1.0) == pytest.approx(0.5), "the entropy counted the tool's tokens"


def test_rloo_kl_shaped_reward_sums_the_model_tokens():
    lp = torch.tensor([[-1.0, -2.0, -9.0, -9.0, -0.5, -0.25]])
    ref = torch.tensor([[-1.5, -1.0, -0.1, -0.1, -1.0, -1.0]])
    # k1 on the model's tokens: 0.5 − 1 + 0.5 + 0.75 = 0.75, so r = 1 − 0.1 · 0.75 = 0.925; with the reply's −17.8: 2.705
    assert compute_kl_shaped_rewards(torch.ones(1), lp, ref, EVERY, 0.1).item() == pytest.approx(2.705)
    assert compute_kl_shaped_rewards(torch.ones(1), lp, ref, MASK, 0.1).item() == pytest.approx(0.925)


def test_a_kl_or_entropy_diagnostic_is_a_mean_over_the_model_tokens():
    kl = torch.tensor([[0.1, 0.3, 5.0, 5.0, 0.2, 0.4]])
    assert masked_mean(kl, EVERY).item() == pytest.approx(11.0 / 6)
    assert masked_mean(kl, MASK).item() == pytest.approx(0.25)  # (0.1 + 0.3 + 0.2 + 0.4) / 4


# PPO. values[:, t] = V(s_t) over prompt + completion (seq_len 8); the generated actions are taken in s_1..s_6,
# v = values[:, 1:7] = [1, 2.5, 50, 60, 3.25, 4]: 50 and 60 are the states inside the tool's reply.
VALUES = torch.tensor([[0.0, 1.0, 2.5, 50.0, 60.0, 3.25, 4.0, 99.0]])
REWARD = torch.tensor([10.0])


def test_next_kept_values_skip_the_environment_tokens():
    v = VALUES[:, 1:7]
    assert next_kept_values(v, MASK).tolist() == [[2.5, 3.25, 3.25, 3.25, 4.0, 0.0]]
    assert last_kept(MASK).tolist() == [[False, False, False, False, False, True]], "the first turn's end is not the episode's"


def test_gae_steps_over_the_tool_reply_as_part_of_the_transition():
    # γ = λ = 0.5 (γλ = 0.25). The state after position 1 is the one the model next acts in, s_5 (V = 3.25):
    #   δ0 = 0.5·2.5 − 1 = 0.25    δ1 = 0.5·3.25 − 2.5 = −0.875    δ4 = 0.5·4 − 3.25 = −1.25    δ5 = 10 − 4 = 6
    #   A5 = 6, A4 = −1.25 + 0.25·6 = 0.25, A1 = −0.875 + 0.25·0.25 = −0.8125, A0 = 0.25 + 0.25·(−0.8125) = 0.046875
    out = compute_gae_advantages(VALUES, REWARD, 2, gamma=0.5, gae_lambda=0.5, mask=MASK)
    assert out.tolist() == [[0.046875, -0.8125, 0.0, 0.0, 0.25, 6.0]]
    through = compute_gae_advantages(VALUES, REWARD, 2, gamma=0.5, gae_lambda=0.5, mask=EVERY)
    assert through[0, 1].item() != out[0, 1].item()  # stepping through the reply's states (V = 50) gives another A_1


def test_one_step_advantage_reads_the_next_model_state():
    # Q0 = V(s_2) = 2.5, Q1 = V(s_5) = 3.25 (not the reply's 50), Q4 = V(s_6) = 4, Q5 = reward 10
    out = compute_advantages(VALUES, REWARD, 2, mask=MASK)
    assert out.tolist() == [[1.5, 0.75, 0.0, 0.0, 0.75, 6.0]]


def test_ppo_value_loss_regresses_the_model_states_only():
    values = torch.tensor([[1.0, 2.0, 50.0, 60.0, 3.0, 4.0]])
    returns = torch.tensor([[2.0, 2.0, 0.0, 0.0, 1.0, 4.0]])
    # ½ · vf_coef · mean over the model's tokens of (V − R)²: ½ · 1 · (1 + 0 + 4 + 0) / 4 = 0.625
    assert calc_value_fn_loss(values, returns, 1.0, mask=MASK).item() == 0.625
    assert calc_value_fn_loss(values, returns, 1.0, mask=EVERY).item() > 100  # the data can tell


def test_ppo_clipped_surrogate_normalises_and_averages_over_the_model_tokens():
    # A on the model's tokens [3, 1, −1, 1] (0 at the reply, as GAE leaves it): mean 1, Bessel std √(8/3), so
    # Â = [√1.5, 0, −√1.5, 0]; r = 1.1 at position 0 (inside the clip), 1 elsewhere on the model's tokens:
    # J = (1.1·√1.5 + 0 − √1.5 + 0) / 4 = 0.1·√1.5 / 4. The reply's zeros in the mean and std, or its far-off
    # ratio e^(−8.9) in the average, give another number.
    advantages = torch.tensor([[3.0, 1.0, 0.0, 0.0, -1.0, 1.0]])
    logprobs = torch.tensor([[math.log(1.1), -2.0, -9.0, -9.0, -0.5, -0.25]])
    old = torch.tensor([[0.0, -2.0, -0.1, -0.1, -0.5, -0.25]])
    every = calc_clipped_sur_obj(logprobs, old, advantages, 0.2, mask=EVERY).item()
    got = calc_clipped_sur_obj(logprobs, old, advantages, 0.2, mask=MASK).item()
    assert every != pytest.approx(got, abs=1e-3)  # the data can tell
    assert got == pytest.approx(0.1 * math.sqrt(1.5) / 4, rel=1e-6), "the surrogate counted the tool's tokens"


# Online DPO: a pair of one prompt, the chosen the two-turn episode, the rejected a one-turn answer (mask T T T F F F).
PAIR_MASK = torch.tensor([[True, True, False, False, True, True], [True, True, True, False, False, False]])
PAIR_POLICY = torch.tensor([[-1.0, -2.0, -9.0, -9.0, -0.5, -0.25], [-0.5, -0.5, -1.0, 0.0, 0.0, 0.0]])
PAIR_REF = torch.tensor([[-1.5, -1.0, -0.1, -0.1, -1.0, -1.0], [-1.0, -0.5, -0.5, 0.0, 0.0, 0.0]])


def test_online_dpo_loss_reads_the_model_tokens_log_probs_only():
    # log π: chosen −3.75 (the reply would add −18), rejected −2; log π_ref: chosen −4.5 (reply: −0.2), rejected −2.
    # h = (−3.75 − −2) − (−4.5 − −2) = 0.75; β = 0.1: ℓ = −log σ(0.075) = log(1 + e^−0.075); chosen's implicit reward 0.075
    def loss(mask):
        policy, ref = sequence_log_probs(PAIR_POLICY, mask), sequence_log_probs(PAIR_REF, mask)
        return calc_dpo_loss(policy[:1], policy[1:], ref[:1], ref[1:], beta=0.1)

    with_reply = loss(PAIR_MASK | torch.tensor([[False, False, True, True, False, False], [False] * 6]))
    assert with_reply.loss.item() == pytest.approx(math.log1p(math.exp(1.705)))  # h = −17.05: the data can tell
    got = loss(PAIR_MASK)
    assert got.loss.item() == pytest.approx(math.log1p(math.exp(-0.075))), "the pair's log-probs counted the tool's reply"
    assert got.chosen_rewards.item() == pytest.approx(0.075) and got.rejected_rewards.item() == pytest.approx(0.0)


def test_online_dpo_logged_kl_and_entropy_sum_the_model_tokens():
    # kl_i = Σ m (log π − log π_ref): chosen 0.5 − 1 + 0.5 + 0.75 = 0.75 (the reply would add −17.8), rejected 0.5 + 0 − 0.5 = 0
    rollout = Rollout(prompt_ids=torch.ones(2, 1, dtype=torch.long), completion_ids=torch.ones(2, 6, dtype=torch.long),
                      attention_mask=torch.ones(2, 7, dtype=torch.bool), completion_mask=PAIR_MASK, logprobs=PAIR_POLICY,
                      ref_logprobs=PAIR_REF, rewards=torch.tensor([1.0, 0.25]), prompts=["q", "q"], completions=["a", "b"],
                      num_generations=2, eos_token_id=0)
    stats = rollout_objective_stats(rollout, torch.tensor([0]), torch.tensor([1]), torch.ones(1), beta=0.1)
    assert stats["objective/kl"] == pytest.approx(0.375), "the KL summed the tool's reply"
    assert stats["objective/entropy"] == pytest.approx((3.75 + 2.0) / 2)
    assert stats["objective/rlhf_reward"] == pytest.approx((1.0 - 0.075 + 0.25) / 2)


def _gae_before_issue_58(values, rewards, prefix_len, gamma, lam, mask):
    """compute_gae_advantages as it was for prefix masks only (commit b5e4dea's), to pin bit-equality."""
    v = values[:, prefix_len - 1 : -1]
    end = mask & ~torch.cat([mask[:, 1:], torch.zeros_like(mask[:, :1])], dim=1)
    next_v = torch.where(mask & ~end, values[:, prefix_len:], torch.zeros_like(v))
    deltas = torch.where(mask, torch.where(end, rewards[:, None], torch.zeros_like(v)) + gamma * next_v - v, torch.zeros_like(v))
    out, running = torch.empty_like(deltas), torch.zeros_like(rewards)
    for t in reversed(range(deltas.shape[1])):
        running = deltas[:, t] + gamma * lam * running
        out[:, t] = running
    return out


def test_a_one_turn_mask_gives_the_advantages_bit_for_bit_as_before():
    torch.manual_seed(3)
    values, rewards = torch.randn(5, 9), torch.randn(5)
    mask = torch.arange(7)[None, :] < torch.tensor([7, 3, 0, 1, 5])[:, None]  # prefixes, one empty
    assert torch.equal(compute_gae_advantages(values, rewards, 2, 0.9, 0.8, mask=mask),
                       _gae_before_issue_58(values, rewards, 2, 0.9, 0.8, mask))
    v = values[:, 1:-1]
    q = torch.where(last_kept(mask), rewards[:, None], values[:, 2:])
    assert torch.equal(compute_advantages(values, rewards, 2, mask=mask), torch.where(mask, q - v, torch.zeros_like(v)))
