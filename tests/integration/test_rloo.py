"""RLOO: leave-one-out advantages, KL shaping and the clipped sequence objective by hand; a bandit
that learns; the trainer's rollout and learning phase on the tiny preset; a run folder."""

import json

import pytest
import torch

from rlhf_scratch.algorithms.rloo import (
    RLOO_METRICS,
    RLOOTrainer,
    calc_clip_ratios,
    calc_rloo_objective,
    compute_kl_shaped_rewards,
    compute_rloo_advantages,
    normalize_advantages,
)
from rlhf_scratch.config import make_args
from rlhf_scratch.engine.loop import SHARED_METRICS
from rlhf_scratch.engine.runs import load_run, read_metrics


def test_leave_one_out_advantages_by_hand():
    # group [1, 2, 3, 6]: baselines (2+3+6)/3, (1+3+6)/3, (1+2+6)/3, (1+2+3)/3 = 11/3, 10/3, 3, 2
    adv = compute_rloo_advantages(torch.tensor([1.0, 2.0, 3.0, 6.0]), 4)
    torch.testing.assert_close(adv, torch.tensor([-8 / 3, -4 / 3, 0.0, 4.0]))
    # the same by G/(G-1)·(r - mean): mean 3, centred [-2, -1, 0, 3], times 4/3
    # (GRPO's plain r - mean, [-2, -1, 0, 3], would fail here: the 4/3 is leave-one-out's)
    # two groups of two: each advantage is the difference to the other completion of its prompt
    adv = compute_rloo_advantages(torch.tensor([1.0, 0.0, 0.5, 0.25]), 2)
    torch.testing.assert_close(adv, torch.tensor([1.0, -1.0, 0.25, -0.25]))


def test_advantages_sum_to_zero_per_group_and_equal_g_over_g_minus_1_times_the_centred_reward():
    torch.manual_seed(0)
    rewards = torch.randn(12)
    for G in (2, 3, 4, 6):
        adv = compute_rloo_advantages(rewards, G)
        torch.testing.assert_close(adv.view(-1, G).sum(1), torch.zeros(12 // G), atol=1e-6, rtol=0)
        centred = rewards.view(-1, G) - rewards.view(-1, G).mean(1, keepdim=True)
        torch.testing.assert_close(adv, (G / (G - 1) * centred).flatten(), atol=1e-6, rtol=0)


def test_advantage_errors_are_one_line():
    with pytest.raises(ValueError, match=r"^compute_rloo_advantages: batch of 6 is not a multiple of num_generations 4$"):
        compute_rloo_advantages(torch.zeros(6), 4)
    with pytest.raises(ValueError, match=r"^compute_rloo_advantages: num_generations must be >= 2"):
        compute_rloo_advantages(torch.zeros(6), 1)


def test_kl_shaped_reward_by_hand():
    old = torch.tensor([[-1.0, -2.0, -0.5]])
    ref = torch.tensor([[-1.5, -1.0, -0.5]])
    # mask [1,1,1]: KL = 0.5 - 1.0 + 0 = -0.5 → 0.8 - 0.1·(-0.5) = 0.85
    full = compute_kl_shaped_rewards(torch.tensor([0.8]), old, ref, torch.tensor([[True, True, True]]), 0.1)
    assert full.item() == pytest.approx(0.85)
    # mask [1,0,1]: KL = 0.5 + 0 → 0.8 - 0.05 = 0.75  (a mask ignored would give 0.85)
    masked = compute_kl_shaped_rewards(torch.tensor([0.8]), old, ref, torch.tensor([[True, False, True]]), 0.1)
    assert masked.item() == pytest.approx(0.75)
    # a sign error (ref - old) would give 0.8 + 0.1·(-0.5) = 0.75 on the full mask and 0.85 on the cut one


def test_kl_shaped_reward_carries_no_gradient():
    logprobs = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    shaped = compute_kl_shaped_rewards(torch.tensor([1.0]), logprobs, torch.tensor([[-1.0, -1.0]]),
                                       torch.tensor([[True, True]]), 0.1)
    assert not shaped.requires_grad, "the KL is part of the reward: it reaches the policy only through A"


def test_whole_batch_normalisation():
    adv = normalize_advantages(torch.tensor([1.0, 3.0]))  # mean 2, std (n-1) √2
    torch.testing.assert_close(adv, torch.tensor([-1.0, 1.0]) / (2**0.5 + 1e-4))


def test_objective_gradient_is_zero_where_the_ratio_is_clipped_on_the_side_the_advantage_pushes():
    old = torch.zeros(4)
    # ratios e^0.5 ≈ 1.65 (A > 0: clipped at 1.2), e^-0.5 ≈ 0.61 (A < 0: clipped at 0.8),
    # e^0.5 with A < 0 (moving back: not clipped), e^-0.5 with A > 0 (not clipped)
    logp = torch.tensor([0.5, -0.5, 0.5, -0.5], requires_grad=True)
    adv = torch.tensor([1.0, -1.0, -1.0, 1.0])
    calc_rloo_objective(logp, old, adv, 0.2, 0.2).backward()
    ratio = torch.tensor([0.5, -0.5, 0.5, -0.5]).exp()
    expected = torch.tensor([0.0, 0.0, -ratio[2] / 4, ratio[3] / 4])  # d/dlogp (ρ A)/4 = ρ A / 4
    torch.testing.assert_close(logp.grad, expected)
    ratios = {key: value.item() for key, value in calc_clip_ratios(logp.detach(), old, adv, 0.2, 0.2).items()}
    assert ratios == {"clip_ratio/low_mean": 0.25, "clip_ratio/high_mean": 0.25, "clip_ratio/region_mean": 0.5}


def test_with_ratio_one_the_gradient_is_reinforce_with_the_leave_one_out_baseline():
    logp = torch.tensor([-3.0, -2.0, -4.0, -1.0], requires_grad=True)
    adv = compute_rloo_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0]), 2)  # [1, -1, -1, 1]
    calc_rloo_objective(logp, logp.detach(), adv, 0.2, 0.2).backward()
    reinforce = logp.detach().clone().requires_grad_(True)
    (adv * reinforce).mean().backward()  # ∇ mean_i A_i log π(o_i)
    torch.testing.assert_close(logp.grad, reinforce.grad)
    torch.testing.assert_close(logp.grad, torch.tensor([0.25, -0.25, -0.25, 0.25]))


def test_a_two_token_bandit_learns_the_rewarded_token():
    """π = softmax(θ) over two tokens; token 1 earns reward 1. RLOO steps must raise π(1)."""
    torch.manual_seed(0)
    theta = torch.zeros(2, requires_grad=True)
    opt = torch.optim.SGD([theta], lr=0.5, maximize=True)
    G = 4
    for _ in range(30):
        logp_all = theta.log_softmax(-1)
        tokens = torch.multinomial(logp_all.exp().detach(), 8 * G, replacement=True)
        rewards = (tokens == 1).float()
        adv = compute_rloo_advantages(rewards, G)
        seq_logp = logp_all[tokens]
        opt.zero_grad()
        calc_rloo_objective(seq_logp, seq_logp.detach(), adv, 0.2, 0.2).backward()
        opt.step()
    assert theta.softmax(-1)[1].item() > 0.9, "RLOO should have learned to pick the rewarded token"


@pytest.fixture(scope="module")
def rloo_run(tmp_path_factory, one_thread):
    run_dir = tmp_path_factory.mktemp("rloo") / "run"
    args = make_args("tiny", algo="rloo", total_phases=2, batch_size=8, num_generations=4, num_minibatches=2,
                     gen_len=8, warmup_steps=1, base_lr=1e-3, final_scale=0.5, seed=3, run_dir=str(run_dir))
    trainer = RLOOTrainer(args, quiet=True)
    ref_before = {k: v.clone() for k, v in trainer.ref_model.state_dict().items()}
    policy_before = {k: v.clone() for k, v in trainer.policy.state_dict().items()}
    trainer.train(run_dir)
    return trainer, run_dir, ref_before, policy_before


def test_rloo_run_writes_a_run_folder_load_run_reads(rloo_run):
    trainer, run_dir, ref_before, policy_before = rloo_run
    metrics = read_metrics(run_dir)
    assert [m["phase"] for m in metrics] == [1, 2]
    for m in metrics:
        missing = set(SHARED_METRICS + RLOO_METRICS) - set(m)
        assert not missing, f"missing metrics: {missing}"
    assert json.loads((run_dir / "config.json").read_text())["algo"] == "rloo"
    run = load_run(run_dir)
    assert run.tuned is run.policy and run.args.algo == "rloo"
    for k, v in trainer.policy.state_dict().items():
        torch.testing.assert_close(run.policy.state_dict()[k], v)
    for k, v in trainer.ref_model.state_dict().items():
        assert torch.equal(v, ref_before[k]), f"reference parameter {k} changed"
    assert any(not torch.equal(v, policy_before[k]) for k, v in trainer.policy.state_dict().items())


@pytest.fixture(scope="module")
def dataset_trainer(tmp_path_factory, one_thread):
    """A trainer on distinct prompts from a .txt file (completions stop at EOS). The prompts are 2, 3,
    5 and 7 tokens long, so every batch of two prompts is left-padded."""
    tmp = tmp_path_factory.mktemp("rloo_prompts")
    (tmp / "prompts.txt").write_text("A\nThe acting\nI thought the film\nWorst of all,\n")
    args = make_args("tiny", algo="rloo", total_phases=2, batch_size=8, num_generations=4, num_minibatches=2,
                     gen_len=8, warmup_steps=0, base_lr=1e-3, seed=4, prompts=str(tmp / "prompts.txt"),
                     run_dir=str(tmp / "run"))
    return RLOOTrainer(args, quiet=True)


def test_rloo_rollout_puts_the_g_completions_of_a_prompt_together(dataset_trainer):
    """The advantage groups are G consecutive rows (`compute_rloo_advantages` views [-1, G]): the token
    rows the policy saw must be grouped the same way — G identical prompt-token rows, one prompt per
    group, the groups different — not just the `prompts` list (built by the same comprehension)."""
    rollout = dataset_trainer.rollout_phase()
    assert len(rollout) == 8 and rollout.num_generations == 4
    rows = [rollout.prompt_ids[i][rollout.attention_mask[i, : rollout.prefix_len]] for i in range(8)]
    for g in (0, 4):
        assert all(torch.equal(rows[g], rows[g + j]) for j in range(4)), "a group's rows must share the prompt tokens"
        text = dataset_trainer.policy.tokenizer.decode(rows[g][1:].tolist())  # without BOS
        assert rollout.prompts[g] == text, "the tokens of the group are the group's prompt"
    assert rows[0].tolist() != rows[4].tolist(), "batch_size // G = 2 different prompts"
    # tie them to the advantage groups: rewards constant within a group of prompt rows → zero advantages
    by_prompt = torch.tensor([float(len(r)) for r in rows])  # a function of the prompt tokens only
    assert torch.equal(compute_rloo_advantages(by_prompt, 4), torch.zeros(8)), "groups of rows ≠ groups of advantages"


def test_first_pass_ratio_is_one_and_learning_phase_metrics_by_hand(dataset_trainer):
    trainer, args = dataset_trainer, dataset_trainer.args
    rollout = trainer.rollout_phase()
    assert not rollout.attention_mask.all(), "this test needs left-padded prompts"
    rollout.completion_mask = mask = rollout.completion_mask.clone()  # (sampling returns inference tensors)
    mask[1, 3:] = False  # as if row 1 had stopped at its 3rd token: the rest must not count
    # Before any step the learning phase's forward must reproduce the rollout's log π_old: ρ = 1.
    # (A misaligned span, a lost attention mask or padding counted in the sum breaks this.)
    with torch.no_grad():
        now = trainer.sequence_log_probs(rollout, torch.arange(8))
    old = torch.where(mask, rollout.logprobs, 0.0).sum(-1)
    torch.testing.assert_close(now, old, atol=1e-4, rtol=1e-4)

    # hand-set rewards: prompt 1's four are equal (no signal), prompt 2's are not
    rollout.scores = rollout.rewards = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0])
    # and a hand-set reference (policy = reference before training, so its KL would be 0): log π_ref
    # is log π_old minus d_i at each row's first token (always kept), so Σ_t (log π_old − log π_ref) = d_i
    d = torch.tensor([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8])
    rollout.ref_logprobs = rollout.logprobs.clone()
    rollout.ref_logprobs[:, 0] -= d
    before = {k: v.clone() for k, v in trainer.policy.state_dict().items()}
    stats = trainer.learning_phase(rollout)
    assert set(stats) == set(RLOO_METRICS)
    assert stats["reward"] == pytest.approx(0.75)  # 6 / 8
    # prompt 1's rewards are equal before the KL shaping, but its shaped rewards (d differs) are not (TRL)
    assert stats["frac_reward_zero_std"] == 0.0, "judged on the KL-shaped rewards, as TRL (raw: 0.5)"
    kept = int(mask.sum())
    assert stats["kl"] == pytest.approx(3.6 / kept, abs=1e-5), "per-token mean of k1 over kept tokens (TRL)"
    assert stats["rewards/shaped_mean"] == pytest.approx(0.75 - args.beta * 0.45, abs=1e-5)
    assert stats["objective/beta"] == args.beta and stats["charts/skipped_steps"] == 0
    # the length lesson's probe, from RLOO's own advantages: in group 1 the scores tie and the KL shaping
    # decides (d 0.1, 0.2 below the others' mean: A > 0; 0.3, 0.4: A < 0), in group 2 the scores 0, 1, 0, 1
    lengths = rollout.lengths.float()
    assert stats["completions/mean_length_neg_adv"] == pytest.approx(lengths[[2, 3, 4, 6]].mean().item())
    assert stats["completions/mean_length_pos_adv"] == pytest.approx(lengths[[0, 1, 5, 7]].mean().item())
    assert any(not torch.equal(v, before[k]) for k, v in trainer.policy.state_dict().items())
    steps = trainer.optimizer.state[next(trainer.policy.parameters())]["step"]
    assert int(steps) == args.num_iterations * args.num_minibatches == 2, "one optimizer step per minibatch"


@pytest.mark.parametrize("swap", [None, "epsilons", "old_new", "policy_reference"])
def test_learning_phase_gradient_and_metrics_equal_a_hand_computation(swap, one_thread):
    """The trainer's gradient on a rollout with hand-set asymmetric values equals the RLOO gradient
    written out here; swapping ε_low/ε_high, old/new log-probs or policy/reference log-probs in the
    hand computation gives another gradient and other clip ratios, so a trainer that passed any two
    of them swapped fails.

        rows (G = 2): scores [1, 0, 0.5, 0.5]; log π_old = log π − δ (ratio e^δ), δ = [0.3, −0.3, 0, 0]
        log π_ref = log π − d at the first token, d = [0.5, −0.1, 0.2, 2.2]:  Σ_t k1 = d − δ = [0.2, 0.2, 0.2, 2.2]
        shaped = scores − β (d − δ);  A = leave-one-out;  ε_low = 0.1, ε_high = 0.5
        row 0: A > 0, ρ = 1.35 < 1.5 (not clipped);  row 1: A < 0, ρ = 0.74 < 0.9 (clipped low)
    """
    args = make_args("tiny", algo="rloo", batch_size=4, num_generations=2, num_minibatches=1, gen_len=5,
                     beta=0.1, epsilon_low=0.1, epsilon_high=0.5, max_grad_norm=1e9, seed=5, total_phases=2)
    trainer = RLOOTrainer(args, quiet=True)
    rollout = trainer.rollout_phase()
    rollout.scores = rollout.rewards = torch.tensor([1.0, 0.0, 0.5, 0.5])
    delta, d = torch.tensor([0.3, -0.3, 0.0, 0.0]), torch.tensor([0.5, -0.1, 0.2, 2.2])
    rollout.ref_logprobs = rollout.logprobs.clone()
    rollout.ref_logprobs[:, 0] -= d
    rollout.logprobs = rollout.logprobs.clone()
    rollout.logprobs[:, 0] -= delta

    eps_low, eps_high = (0.5, 0.1) if swap == "epsilons" else (0.1, 0.5)
    old = rollout.logprobs.sum(-1)
    k1 = (rollout.ref_logprobs - rollout.logprobs) if swap == "policy_reference" else (rollout.logprobs - rollout.ref_logprobs)
    shaped = rollout.scores - 0.1 * k1.sum(-1)
    grouped = shaped.view(2, 2)
    adv = (grouped - grouped.flip(1)).flatten()  # G = 2: the other completion is the baseline
    params = [p for p in trainer.policy.parameters() if p.requires_grad]
    now = trainer.sequence_log_probs(rollout, torch.arange(4))
    ratio = (old - now).exp() if swap == "old_new" else (now - old).exp()
    hand = torch.minimum(ratio * adv, ratio.clamp(1 - eps_low, 1 + eps_high) * adv).mean()
    expected = torch.autograd.grad(hand, params, allow_unused=True)
    low = ((ratio < 1 - eps_low) & (adv < 0)).float().mean().item()
    high = ((ratio > 1 + eps_high) & (adv > 0)).float().mean().item()

    stats = trainer.learning_phase(rollout)
    got = [p.grad for p in params]
    same = all(torch.allclose(g, e, atol=1e-6, rtol=1e-4) for g, e in zip(got, expected) if e is not None)
    if swap is None:
        assert (low, high) == (0.25, 0.0), "the hand computation: row 1 clipped low, nothing high"
        assert same, "the trainer's gradient is not the RLOO gradient of the hand computation"
        assert stats["clip_ratio/low_mean"] == 0.25 and stats["clip_ratio/high_mean"] == 0.0
        assert stats["clip_ratio/region_mean"] == 0.25
        assert stats["objective/rloo"] == pytest.approx(hand.item(), abs=1e-6)
    else:
        assert not same, f"swapping {swap} gives the same gradient: the test cannot tell"


def test_interp_report_reads_an_rloo_run(rloo_run):
    from interp.report import main as report

    _, run_dir, _, _ = rloo_run
    assert report([str(run_dir), "--no-reward"]) == 0
    assert (run_dir / "interp" / "report.html").is_file() and (run_dir / "interp" / "summary.json").is_file()
