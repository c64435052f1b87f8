"""Online DPO: the loss and its gradient by hand, winner selection (ties, EOS penalty, judges), a
preference toy that learns, and runs on the tiny preset with the reward model and with a judge."""

import math

import pytest
import torch

from rlhf_scratch.algorithms.online_dpo import (
    DPO_METRICS,
    OnlineDPOTrainer,
    calc_dpo_loss,
    select_chosen,
    select_chosen_by_judge,
)
from rlhf_scratch.config import make_args
from rlhf_scratch.judges import ClassifierJudge, VaderJudge
from rlhf_scratch.loop import SHARED_METRICS
from rlhf_scratch.rollout import Rollout
from rlhf_scratch.runs import load_run, read_metrics


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
    ipo = calc_dpo_loss(t(-10.0), t(-12.0), t(-11.0), t(-11.0), beta=0.1, loss_type="ipo")
    assert ipo.loss.item() == pytest.approx((2 - 1 / 0.2) ** 2)  # (2 − 5)² = 9


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
        scores=scores, rewards=scores, prompts=["p"] * n, completions=["a", "b", "c", "d"][:n], num_generations=2, eos_token_id=0,
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


def test_a_judge_returning_minus_one_skips_the_pair():
    rollout = _pair_rollout([[5, 6, 7], [5, 6, 8], [1, 2, 3], [3, 2, 1]], t(0, 0, 0, 0))
    chosen, rejected, skipped = select_chosen_by_judge(lambda prompts, pairs: [-1, 1], rollout)
    assert (chosen.tolist(), rejected.tolist(), skipped) == ([3], [2], 1)
    with pytest.raises(ValueError, match="judge: must return one of 0, 1, -1 per pair"):
        select_chosen_by_judge(lambda prompts, pairs: [2, 0], rollout)


@pytest.mark.parametrize("judge_cls", [ClassifierJudge, VaderJudge])
def test_shipped_judges_pick_the_obvious_completion(judge_cls):
    pairs = [("a great, wonderful, moving film", "an awful, terrible, boring mess")]
    assert judge_cls("pos")(["This was "], pairs) == [0]
    assert judge_cls("neg")(["This was "], pairs) == [1]
    assert VaderJudge("pos")(["x"], [("table", "chair")]) == [-1], "no sentiment words: VADER cannot tell"


def test_a_two_token_preference_toy_learns():
    """π = softmax(θ); token 1 is always preferred to token 0. DPO steps must raise π(1)."""
    theta = torch.zeros(2, requires_grad=True)
    ref = torch.zeros(2).log_softmax(-1)
    opt = torch.optim.SGD([theta], lr=1.0)
    for _ in range(50):
        logp = theta.log_softmax(-1)
        loss = calc_dpo_loss(logp[1:], logp[:1], ref[1:], ref[:1], beta=0.5).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert theta.softmax(-1)[1].item() > 0.9, "DPO should have raised the preferred token's probability"


@pytest.mark.parametrize("judge", [None, "tiny"])
def test_online_dpo_runs_on_the_tiny_preset(tmp_path, judge, one_thread):
    run_dir = tmp_path / "run"
    args = make_args("tiny", algo="online_dpo", total_phases=2, batch_size=8, num_minibatches=2, gen_len=8,
                     warmup_steps=1, base_lr=1e-3, final_scale=0.5, seed=3, judge=judge, run_dir=str(run_dir))
    trainer = OnlineDPOTrainer(args, quiet=True)
    ref_before = {k: v.clone() for k, v in trainer.ref_model.state_dict().items()}
    policy_before = {k: v.clone() for k, v in trainer.policy.state_dict().items()}
    rollout = trainer.rollout_phase()
    assert rollout.prompts[0::2] == rollout.prompts[1::2], "the two completions of a prompt are rows 2i, 2i+1"
    trainer.train(run_dir)
    metrics = read_metrics(run_dir)
    assert [m["phase"] for m in metrics] == [1, 2]
    missing = set(SHARED_METRICS + DPO_METRICS) - set(metrics[-1])
    assert not missing or (judge and missing <= {"loss/dpo", "rewards/chosen", "rewards/rejected", "rewards/margins",
                                                   "rewards/accuracies", "logps/chosen", "logps/rejected"}), missing
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
