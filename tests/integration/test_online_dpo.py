"""Online DPO: the loss and its gradient by hand, winner selection (ties, EOS penalty, judges), a
preference toy that learns, and runs on the tiny preset with the reward model and with a judge."""

import math

import pytest
import torch

from rlhf_scratch.algorithms.online_dpo import (
    DPO_METRICS,
    OnlineDPOTrainer,
    calc_dpo_loss,
    implicit_reward_stats,
    select_chosen,
    select_chosen_by_judge,
)
from rlhf_scratch.config import make_args
from rlhf_scratch.core.objectives import sequence_log_probs
from rlhf_scratch.engine.loop import SHARED_METRICS
from rlhf_scratch.engine.optim import get_optimizer
from rlhf_scratch.engine.runs import load_run, read_metrics
from rlhf_scratch.reward.judges import ClassifierJudge, VaderJudge
from rlhf_scratch.rollout.phase import Rollout


def t(*xs):
    return torch.tensor(xs, dtype=torch.float32)


def test_dpo_loss_and_gradient_by_hand():
    pi_c = t(-10.0).requires_grad_(True)
    # h = (−10 − (−12)) − (−11 − (−11)) = 2; β h = 0.2
    out = calc_dpo_loss(pi_c, t(-12.0), t(-11.0), t(-11.0), beta=0.1)
    assert out.loss.item() == pytest.approx(math.log(1 + math.exp(-0.2)), abs=1e-6)  # 0.59814
    out.loss.backward()
    sigma = 1 / (1 + math.exp(0.2))  # σ(−0.2)
    assert pi_c.grad.item() == pytest.approx(-0.1 * sigma, abs=1e-6)  # −0.045017
    assert out.chosen_rewards.item() == pytest.approx(0.1) and out.rejected_rewards.item() == pytest.approx(-0.1)
    assert out.loss.item() != pytest.approx(math.log(1 + math.exp(-2.0))), "β is missing: that is −log σ(h)"
    stats = {key: value.item() for key, value in implicit_reward_stats(out.chosen_rewards, out.rejected_rewards).items()}
    assert stats == pytest.approx({"rewards/chosen": 0.1, "rewards/rejected": -0.1, "rewards/margins": 0.2,
                                   "rewards/accuracies": 1.0})


def test_ipo_loss_and_gradient_by_hand():
    pi_c = t(-10.0).requires_grad_(True)
    ipo = calc_dpo_loss(pi_c, t(-12.0), t(-11.0), t(-11.0), beta=0.1, loss_type="ipo")
    assert ipo.loss.item() == pytest.approx(9.0), "h = 2, target 1/(2β) = 5: (2 − 5)² = 9"
    ipo.loss.backward()
    assert pi_c.grad.item() == pytest.approx(-6.0), "∂/∂π_c (h − 5)² = 2 (h − 5) = −6"


def test_implicit_reward_accuracy_counts_ties_as_wrong():
    stats = implicit_reward_stats(t(0.3, 0.0, -0.2), t(0.1, 0.0, 0.4))
    assert stats["rewards/accuracies"].item() == pytest.approx(1 / 3)  # only 0.3 > 0.1
    assert stats["rewards/margins"].item() == pytest.approx((0.2 + 0.0 - 0.6) / 3)
    undecided_out = implicit_reward_stats(t(0.3, 0.0, -0.2), t(0.1, 0.0, 0.4), mask=torch.tensor([True, False, True]))
    assert undecided_out["rewards/accuracies"].item() == pytest.approx(1 / 2)  # the tie's pair is not counted
    assert undecided_out["rewards/chosen"].item() == pytest.approx(0.05)


def test_weighted_loss_is_the_mean_over_the_pairs_of_weight_one():
    pi_c = t(-10.0, -1.0, -3.0).requires_grad_(True)
    out = calc_dpo_loss(pi_c, t(-12.0, -1.0, -2.0), t(-11.0, 0.0, 0.0), t(-11.0, 0.0, 0.0), beta=0.1,
                        weights=t(1.0, 0.0, 1.0))
    ell = [math.log(1 + math.exp(-0.2)), math.log(1 + math.exp(0.1))]  # h = 2 and h = −1
    assert out.loss.item() == pytest.approx(sum(ell) / 2, abs=1e-6), "Σ w ℓ / Σ w (not / 3, nor ℓ of pair 2)"
    out.loss.backward()
    assert pi_c.grad[1].item() == 0.0, "a pair of weight 0 gets no gradient"
    none = calc_dpo_loss(t(-1.0), t(-1.0), t(0.0), t(0.0), beta=0.1, weights=t(0.0))
    assert none.loss.item() == 0.0, "no decided pair: loss 0, not NaN"


def test_policy_equal_to_reference_gives_ln_2():
    out = calc_dpo_loss(t(-3.0, -7.0), t(-5.0, -1.0), t(-3.0, -7.0), t(-5.0, -1.0), beta=0.5)
    assert out.loss.item() == pytest.approx(math.log(2))


def test_huge_margins_stay_finite():
    for margin in (1e4, -1e4):
        pi_c = t(margin).requires_grad_(True)
        out = calc_dpo_loss(pi_c, t(0.0), t(0.0), t(0.0), beta=1.0)
        out.loss.backward()
        assert math.isfinite(out.loss.item()) and math.isfinite(pi_c.grad.item())
    assert calc_dpo_loss(t(-1e4), t(0.0), t(0.0), t(0.0), beta=1.0).loss.item() == pytest.approx(1e4)


def test_select_chosen_ties_go_to_the_first():
    chosen, rejected = select_chosen(t(0.2, 0.9, 0.5, 0.5, 0.7, 0.1))
    assert chosen.tolist() == [1, 2, 4] and rejected.tolist() == [0, 3, 5]


def _pair_rollout(completion_ids, scores, penalty=None):
    """A hand-built rollout of one pair: prompt [BOS], completions of 3 tokens, EOS id 0."""
    n = len(completion_ids)
    ids = torch.tensor(completion_ids)
    mask = torch.ones(n, 3, dtype=torch.bool)
    rollout = Rollout(
        prompt_ids=torch.zeros(n, 1, dtype=torch.long), completion_ids=ids,
        attention_mask=torch.ones(n, 4, dtype=torch.bool), completion_mask=mask,
        logprobs=torch.zeros(n, 3), ref_logprobs=torch.zeros(n, 3), kl=torch.zeros(n, 3), entropy=torch.zeros(n, 3),
        scores=scores, rewards=scores, prompts=["p"] * n, completions=[chr(97 + i) for i in range(n)], num_generations=2, eos_token_id=0,
    )
    if penalty:
        rollout.rewards = scores - penalty * (~rollout.is_terminated).float()
    return rollout


def test_missing_eos_penalty_can_flip_a_pair_and_looks_at_the_completion_only():
    # the first scores higher but never ends (the prompt is BOS = EOS = 0: must not count)
    rollout = _pair_rollout([[5, 6, 7], [5, 0, 0]], t(0.9, 0.8), penalty=0.5)
    assert rollout.is_terminated.tolist() == [False, True]
    chosen, rejected = select_chosen(rollout.rewards)
    assert (chosen.tolist(), rejected.tolist()) == ([1], [0]), "0.9 − 0.5 < 0.8: the second wins"
    no_penalty = _pair_rollout([[5, 6, 7], [5, 0, 0]], t(0.9, 0.8))
    assert select_chosen(no_penalty.rewards)[0].tolist() == [0]


def test_a_judge_returning_minus_one_weights_the_pair_zero():
    rollout = _pair_rollout([[5, 6, 7], [5, 6, 8], [1, 2, 3], [3, 2, 1], [4, 4, 4], [9, 9, 9]], t(0, 0, 0, 0, 0, 0))
    chosen, rejected, weights = select_chosen_by_judge(lambda prompts, pairs: [-1, 1, 0], rollout)
    assert (chosen.tolist(), rejected.tolist(), weights.tolist()) == ([0, 3, 4], [1, 2, 5], [0.0, 1.0, 1.0]), (
        "an undecided pair stays (rows first, second) with weight 0, so every rank keeps as many pairs")
    with pytest.raises(ValueError, match="judge: must return one of 0, 1, -1 per pair"):
        select_chosen_by_judge(lambda prompts, pairs: [2, 0], rollout)


@pytest.mark.parametrize("judge_cls", [ClassifierJudge, VaderJudge])
def test_shipped_judges_pick_the_obvious_completion(judge_cls):
    pairs = [("a great, wonderful, moving film", "an awful, terrible, boring mess")]
    assert judge_cls("pos")(["This was "], pairs) == [0]
    assert judge_cls("neg")(["This was "], pairs) == [1]
    assert VaderJudge("pos")(["x"], [("table", "chair")]) == [-1], "no sentiment words: VADER cannot tell"


def test_a_two_token_preference_toy_learns():
    """π = softmax(θ); token 1 is always preferred to token 0. A few steps with the trainers'
    optimizer (maximize=True) on objective = −loss must raise π(1); a flipped sign lowers it."""
    toy = torch.nn.Module()
    toy.theta = torch.nn.Parameter(torch.zeros(2))
    ref = torch.zeros(2).log_softmax(-1)
    opt = get_optimizer(toy, base_lr=0.1)
    for _ in range(20):
        logp = toy.theta.log_softmax(-1)
        loss = calc_dpo_loss(logp[1:], logp[:1], ref[1:], ref[:1], beta=0.5).loss
        objective = -loss
        opt.zero_grad()
        objective.backward()
        opt.step()
    assert toy.theta.softmax(-1)[1].item() > 0.9, "DPO should have raised the preferred token's probability"


def _trainer(**overrides):
    settings = dict(total_phases=4, batch_size=8, num_minibatches=2, gen_len=8, warmup_steps=0, base_lr=1e-3, seed=3,
                    temperature=1.0)  # (the default is TRL's 0.9; these hand-checked numbers were set at 1)
    args = make_args("tiny", algo="online_dpo", **{**settings, **overrides})
    return OnlineDPOTrainer(args, quiet=True)


def test_learning_phase_widens_the_chosen_margin(one_thread):
    """On a fixed rollout, the trainer's own steps must raise h = (π_c − π_r) − (ref_c − ref_r):
    this fails if the trainer descends where it should ascend."""
    trainer = _trainer()
    rollout = trainer.rollout_phase()
    chosen, rejected = select_chosen(rollout.rewards)
    ref = sequence_log_probs(rollout.ref_logprobs, rollout.completion_mask)

    def mean_h():
        with torch.no_grad():
            logps = trainer.sequence_log_probs(rollout, torch.arange(len(rollout)))
        return ((logps[chosen] - logps[rejected]) - (ref[chosen] - ref[rejected])).mean().item()

    assert mean_h() == pytest.approx(0.0, abs=1e-3), "policy = reference at the start"
    losses = [trainer.learning_phase(rollout)["loss/dpo"] for _ in range(3)]
    assert mean_h() > 0.5, f"three phases of DPO on the same pairs should widen the margin; h = {mean_h():.3f}"
    assert losses[-1] < losses[0] < math.log(2) + 0.05, f"the loss starts near ln 2 and falls: {losses}"


@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step")  # no step was taken: expected
def test_a_judge_that_cannot_tell_skips_every_pair(one_thread):
    calls = []

    def undecided(prompts, pairs):
        calls.append(len(pairs))
        return [-1] * len(pairs)

    trainer = _trainer()
    trainer.judge = undecided
    before = {k: v.clone() for k, v in trainer.policy.state_dict().items()}
    stats = trainer.learning_phase(trainer.rollout_phase())
    assert calls == [4] and stats["judge/skipped"] == 4, "8 completions = 4 pairs, all skipped"
    assert "loss/dpo" not in stats and stats["charts/skipped_steps"] == 0, "no pair: no loss, no step"
    assert all(torch.equal(v, before[k]) for k, v in trainer.policy.state_dict().items())


def test_the_two_rows_of_a_pair_share_their_prompt_tokens_and_pairs_differ(tmp_path, one_thread):
    """Distinct prompts (a .txt of 4, of 2 to 7 tokens): rows 2i and 2i+1 hold the same prompt tokens,
    which differ from the next pair's (with one shared prefix, any pairing would pass)."""
    (tmp_path / "prompts.txt").write_text("A\nThe acting\nI thought the film\nWorst of all,\n")
    trainer = _trainer(prompts=str(tmp_path / "prompts.txt"))
    rollout = trainer.rollout_phase()
    rows = [rollout.prompt_ids[i][rollout.attention_mask[i, : rollout.prefix_len]] for i in range(len(rollout))]
    for i in range(0, len(rollout), 2):
        assert torch.equal(rows[i], rows[i + 1]), f"rows {i}, {i + 1}: a pair's completions continue one prompt"
    assert len({tuple(r.tolist()) for r in rows[0::2]}) == len(rollout) // 2, "each pair its own prompt"


@pytest.mark.parametrize("swap", [None, "chosen_rejected", "policy_reference"])
def test_learning_phase_gradient_and_metrics_equal_a_hand_computation(swap, one_thread):
    """The trainer's gradient on a rollout with hand-set values equals the DPO gradient written out
    here, with a judge that cannot decide one pair (weight 0). Swapping chosen/rejected or policy/
    reference in the hand computation gives another gradient, so a trainer that swapped them fails.

        4 pairs; the judge says [1, −1, 0, 1]; log π_ref = log π − d at each row's first token,
        d = [0.3, −0.2, 0.9, 0.1, −0.4, 0.5, 0.0, 1.2]; h = (π_c − π_r) − (ref_c − ref_r) = d_c − d_r at the start
    """
    trainer = _trainer(batch_size=8, num_minibatches=1, beta=0.5, max_grad_norm=1e9)
    trainer.judge = lambda prompts, pairs: [1, -1, 0, 1]
    rollout = trainer.rollout_phase()
    d = t(0.3, -0.2, 0.9, 0.1, -0.4, 0.5, 0.0, 1.2)
    rollout.ref_logprobs = rollout.logprobs.clone()
    rollout.ref_logprobs[:, 0] -= d
    rollout.rewards = rollout.scores = t(0.1, 0.9, 0.4, 0.2, 0.7, 0.3, 0.0, 1.0)
    chosen, rejected = torch.tensor([1, 4, 7]), torch.tensor([0, 5, 6])  # pair 1 (rows 2, 3) undecided
    if swap == "chosen_rejected":
        chosen, rejected = rejected, chosen
    params = [p for p in trainer.policy.parameters() if p.requires_grad]
    logps = trainer.sequence_log_probs(rollout, torch.arange(8))
    ref = sequence_log_probs(rollout.ref_logprobs, rollout.completion_mask)
    if swap == "policy_reference":
        logps, ref = ref + 0 * logps, logps
    h = (logps[chosen] - logps[rejected]) - (ref[chosen] - ref[rejected])
    hand = -torch.nn.functional.logsigmoid(0.5 * h).mean()
    expected = torch.autograd.grad(-hand, params, allow_unused=True)  # the trainer ascends −loss

    stats = trainer.learning_phase(rollout)
    same = all(torch.allclose(p.grad, e, atol=1e-6, rtol=1e-4) for p, e in zip(params, expected) if e is not None)
    if swap is None:
        assert same, "the trainer's gradient is not the DPO gradient over the decided pairs"
        assert stats["loss/dpo"] == pytest.approx(hand.item(), abs=1e-6)
        assert stats["judge/skipped"] == 1
        assert stats["objective/scores_margin"] == pytest.approx(((0.9 - 0.1) + (0.7 - 0.3) + (1.0 - 0.0)) / 3)
        hd = (d[chosen] - d[rejected]) * 0.5  # implicit rewards β (π − ref) = β d at the start
        assert stats["rewards/margins"] == pytest.approx(hd.mean().item(), abs=1e-5)
        assert stats["rewards/chosen"] == pytest.approx(0.5 * d[chosen].mean().item(), abs=1e-5)
        assert stats["rewards/accuracies"] == pytest.approx(1 / 3), "d_c > d_r in the last pair only"
    else:
        assert not same, f"swapping {swap} gives the same gradient: the test cannot tell"


def test_objective_metrics_have_trls_meaning(one_thread):
    """TRL's objective/kl is the mean SEQUENCE sum of log π − log π_ref, objective/entropy the mean of
    −Σ_t log π, objective/scores the reward after the missing-EOS penalty."""
    trainer = _trainer(batch_size=4, num_minibatches=1, beta=0.5)
    rollout = trainer.rollout_phase()
    rollout.completion_mask = rollout.completion_mask.clone()
    rollout.completion_mask[1, 2:] = False  # padding after an EOS must not count
    rollout.logprobs = torch.full_like(rollout.logprobs, -2.0)
    rollout.ref_logprobs = torch.full_like(rollout.logprobs, -3.0)
    rollout.scores, rollout.rewards = t(1.0, 2.0, 3.0, 4.0), t(0.0, 2.0, 3.0, 4.0)  # as after a penalty on row 0
    n = rollout.completion_mask.sum(-1).float()  # kept tokens per row
    stats = trainer.learning_phase(rollout)
    assert stats["objective/kl"] == pytest.approx(n.mean().item()), "Σ_t (−2 − (−3)) = kept tokens, averaged"
    assert stats["objective/entropy"] == pytest.approx(2 * n.mean().item())
    assert stats["objective/non_score_reward"] == pytest.approx(-0.5 * n.mean().item())
    assert stats["objective/scores"] == pytest.approx(2.25), "after the missing-EOS penalty (before: 2.5)"
    assert stats["objective/rlhf_reward"] == pytest.approx(2.25 - 0.5 * n.mean().item())


@pytest.mark.parametrize("judge", [None, "tiny", "vader"])
def test_online_dpo_runs_on_the_tiny_preset(tmp_path, judge, one_thread):
    run_dir = tmp_path / "run"
    args = make_args("tiny", algo="online_dpo", total_phases=2, batch_size=8, num_minibatches=2, gen_len=8,
                     warmup_steps=1, base_lr=1e-3, final_scale=0.5, seed=3, judge=judge, run_dir=str(run_dir))
    trainer = OnlineDPOTrainer(args, quiet=True)
    ref_before = {k: v.clone() for k, v in trainer.ref_model.state_dict().items()}
    policy_before = {k: v.clone() for k, v in trainer.policy.state_dict().items()}
    trainer.train(run_dir)
    metrics = read_metrics(run_dir)
    assert [m["phase"] for m in metrics] == [1, 2]
    missing = set(SHARED_METRICS + DPO_METRICS) - set(metrics[-1])
    assert not missing, f"a phase with no judged pair would lack these; pick another seed: {missing}"
    run = load_run(run_dir)
    assert run.args.algo == "online_dpo" and run.tuned is run.policy
    assert all(torch.equal(v, ref_before[k]) for k, v in trainer.ref_model.state_dict().items())
    assert any(not torch.equal(v, policy_before[k]) for k, v in trainer.policy.state_dict().items())


def test_interp_report_reads_a_dpo_run(tmp_path, one_thread):
    from interp.report import main as report

    run_dir = tmp_path / "run"
    args = make_args("tiny", algo="online_dpo", total_phases=1, batch_size=4, num_minibatches=2, gen_len=4,
                     run_dir=str(run_dir))
    OnlineDPOTrainer(args, quiet=True).train(run_dir)
    assert report([str(run_dir), "--no-reward"]) == 0
    assert (run_dir / "interp" / "report.html").is_file()
