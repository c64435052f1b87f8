"""Exercises 06 (the capstones): each check fails on planted classic bugs with their named hints, and
the solutions written for reading (course/solutions_capstones.py) agree with the package's own — RLOO's
trainer phase for phase, the microscope's exact KL, `studies.stats`' paired difference.

The planted bugs are written out as a learner would. The generic tests (each check passes its
solution, no mistake gives the answer, the exercise notebook is what the generator writes and its
stubs raise) are in test_course_checks.py; they read `rlhf_scratch.course.catalogue`.
"""

import copy
import math
import statistics

import pytest
import torch
from test_course_checks import fails_with

from rlhf_scratch.config import registry
from rlhf_scratch.course import checks_capstones
from rlhf_scratch.course.capstone_kit import train_phases
from rlhf_scratch.course.solutions_capstones import (
    MyRLOOArgs,
    MyRLOOTrainer,
    make_rloo_algorithm,
    paired_difference_interval,
)
from rlhf_scratch.studies.stats import paired_difference, t_quantile

# --- make_rloo_algorithm: RLOO's trainer with one mistake each ---------------------------------


class OwnSampleInBaseline(MyRLOOTrainer):
    def compute_advantages(self, batch):
        e, G = batch.everyone, self.args.num_generations
        kl = ((e.logprobs - e.ref_logprobs) * e.completion_mask).sum(-1)
        r = (e.rewards - self.args.beta * kl).view(-1, G)
        batch.advantages = (r - r.mean(dim=1, keepdim=True)).flatten()


class WrongGroupAxis(MyRLOOTrainer):
    def compute_advantages(self, batch):
        e, G = batch.everyone, self.args.num_generations
        kl = ((e.logprobs - e.ref_logprobs) * e.completion_mask).sum(-1)
        r = (e.rewards - self.args.beta * kl).view(G, -1)  # a prompt's completions read down a column
        batch.advantages = (r - (r.sum(dim=0, keepdim=True) - r) / (G - 1)).flatten()


class NoDivisionByGMinusOne(MyRLOOTrainer):
    def compute_advantages(self, batch):
        e, G = batch.everyone, self.args.num_generations
        kl = ((e.logprobs - e.ref_logprobs) * e.completion_mask).sum(-1)
        r = (e.rewards - self.args.beta * kl).view(-1, G)
        batch.advantages = (r - (r.sum(dim=1, keepdim=True) - r)).flatten()


class NoKLInTheReward(MyRLOOTrainer):
    def compute_advantages(self, batch):
        G = self.args.num_generations
        r = batch.everyone.rewards.view(-1, G)
        batch.advantages = (r - (r.sum(dim=1, keepdim=True) - r) / (G - 1)).flatten()


class KLAveragedOverTokens(MyRLOOTrainer):
    def compute_advantages(self, batch):
        e, G = batch.everyone, self.args.num_generations
        per_token = (e.logprobs - e.ref_logprobs) * e.completion_mask
        kl = per_token.sum(-1) / e.completion_mask.sum(-1)  # the mistake: a mean over the tokens, not their sum
        r = (e.rewards - self.args.beta * kl).view(-1, G)
        batch.advantages = (r - (r.sum(dim=1, keepdim=True) - r) / (G - 1)).flatten()


class RatioFromTheMeanLogRatio(MyRLOOTrainer):
    def update_actor(self, batch):
        from rlhf_scratch.core.memory import minibatch_rows

        args, rollout, A = self.args, batch.rollout, batch.local_advantages
        mask = rollout.completion_mask

        def objective(rows):
            log_ratio = (self.token_log_probs(rollout, rows) - rollout.logprobs[rows]) * mask[rows]
            ratio = (log_ratio.sum(-1) / mask[rows].sum(-1)).exp()  # the mistake: exp of the MEAN, not of the sum
            J = torch.minimum(ratio * A[rows], ratio.clamp(1 - args.epsilon_low, 1 + args.epsilon_high) * A[rows]).mean()
            return J, {"objective/rloo": J.item()}

        return self.ascend(minibatch_rows(len(rollout), args.num_minibatches, args.num_iterations), objective)


class Minimised(MyRLOOTrainer):
    def update_actor(self, batch):
        from rlhf_scratch.core.memory import minibatch_rows
        from rlhf_scratch.core.objectives import sequence_log_probs

        args, rollout, A = self.args, batch.rollout, batch.local_advantages
        old = sequence_log_probs(rollout.logprobs, rollout.completion_mask)

        def objective(rows):
            ratio = (self.sequence_log_probs(rollout, rows) - old[rows]).exp()
            J = torch.minimum(ratio * A[rows], ratio.clamp(1 - args.epsilon_low, 1 + args.epsilon_high) * A[rows]).mean()
            return -J, {"objective/rloo": J.item()}  # the mistake: a loss handed to an ascent

        return self.ascend(minibatch_rows(len(rollout), args.num_minibatches, args.num_iterations), objective)


class Unclipped(MyRLOOTrainer):
    def update_actor(self, batch):
        from rlhf_scratch.core.memory import minibatch_rows
        from rlhf_scratch.core.objectives import sequence_log_probs

        args, rollout, A = self.args, batch.rollout, batch.local_advantages
        old = sequence_log_probs(rollout.logprobs, rollout.completion_mask)

        def objective(rows):
            J = ((self.sequence_log_probs(rollout, rows) - old[rows]).exp() * A[rows]).mean()
            return J, {"objective/rloo": J.item()}

        return self.ascend(minibatch_rows(len(rollout), args.num_minibatches, args.num_iterations), objective)


def entry_of(trainer_class):
    def make_rloo_algorithm(name="my_rloo"):
        return registry.Algorithm(name, "bug", args=MyRLOOArgs, trainer=trainer_class)

    make_rloo_algorithm.__name__ = trainer_class.__name__
    return make_rloo_algorithm


@pytest.mark.parametrize("bug, phrase", [
    (OwnSampleInBaseline, "the baseline includes the completion's own reward"),
    (WrongGroupAxis, "wrong group axis"),
    (NoDivisionByGMinusOne, "no /(G − 1)"),
    (NoKLInTheReward, "the KL is missing from the reward"),
    (KLAveragedOverTokens, "the KL AVERAGED over the completion's tokens"),
    (RatioFromTheMeanLogRatio, "the ratio from the MEAN per-token log-ratio"),
    (Minimised, "the objective was minimised"),
    (Unclipped, "the clip is missing"),
], ids=lambda x: getattr(x, "__name__", "")[:30])
def test_make_rloo_algorithm_names_each_planted_mistake(bug, phrase):
    fails_with("make_rloo_algorithm", entry_of(bug), phrase)
    assert "my_rloo" not in registry.ALGORITHMS, "the check registers the entry only while it runs"


def test_make_rloo_algorithm_refuses_an_entry_under_another_name_and_one_sampling_once_per_prompt():
    def wrong_name(name="my_rloo"):
        return registry.Algorithm("rloo2", "x", args=MyRLOOArgs, trainer=MyRLOOTrainer)

    fails_with("make_rloo_algorithm", wrong_name, "use the `name` argument")

    class OneGeneration(MyRLOOTrainer):
        generations = staticmethod(lambda args: 1)

    fails_with("make_rloo_algorithm", entry_of(OneGeneration), "define the static method `generations(args)`")


def test_the_checks_planted_phase_without_a_mistake_is_the_package_phase():
    """`_phase` (the mistakes' runs) with no mistake gives RLOOTrainer's own update: so each mistake's
    numbers differ from the answer by the mistake alone."""
    from rlhf_scratch.engine.batch import gather_batch

    C = checks_capstones
    start = C.starting_state()
    C._restore(start.trainer, start)
    batch = gather_batch(copy.deepcopy(start.rollout))
    start.trainer.compute_advantages(batch)
    C._phase(start.trainer, batch)
    assert C._agreement(C._update(start.trainer, start), C._package_results()["package"]) == pytest.approx([1.0, 0.0], abs=1e-6)


@pytest.mark.slow  # three phases through the engine, with a run folder
def test_the_solution_trains_through_the_engine_and_unregisters_itself():
    metrics = train_phases(make_rloo_algorithm(), phases=2)
    assert [m["phase"] for m in metrics] == [1, 2]
    assert all(math.isfinite(m["objective/rloo"]) for m in metrics)
    assert "my_rloo" not in registry.ALGORITHMS


# --- calc_k3_kl: graded by the microscope -------------------------------------------------------


def k3_as_k2(logprobs, ref_logprobs):
    return 0.5 * (logprobs - ref_logprobs) ** 2


def k3_inverted_ratio(logprobs, ref_logprobs):
    x = logprobs - ref_logprobs  # log(pi / pi_ref): upside down
    return x.exp() - 1 - x


def k3_without_the_minus_one(logprobs, ref_logprobs):
    x = ref_logprobs - logprobs
    return x.exp() - x


def k1_for_k3(logprobs, ref_logprobs):
    return logprobs - ref_logprobs


def test_k3_check_says_biased_by_the_exact_amount_and_names_k2():
    message = fails_with("calc_k3_kl", k3_as_k2, "that is k2")
    bias = checks_capstones.exact_mean(k3_as_k2) - checks_capstones.exact_kl()
    assert abs(bias) > 1e-3 and f"biased by {bias:+.6g}" in message


def test_k3_check_names_the_inverted_ratio_and_the_missing_minus_one_with_the_expected_length():
    fails_with("calc_k3_kl", k3_inverted_ratio, "the ratio is upside down")
    message = fails_with("calc_k3_kl", k3_without_the_minus_one, "the −1 is missing")
    length = checks_capstones._microscope()[5]
    assert f"biased by {length:+.6g}" in message, "E_π[r] = 1 per token: the bias is the expected length"


def test_k3_check_passes_k1_on_the_microscope_and_names_it_by_hand():
    message = fails_with("calc_k3_kl", k1_for_k3, "that is k1")
    assert "case 2/2" in message and "your estimator is unbiased" in message


def test_the_microscope_is_exact_k1_is_unbiased_to_float_precision():
    """E_π[Σ_t k1] = KL(π ‖ π_ref) identically: the grader's own zero."""
    assert checks_capstones.exact_mean(k1_for_k3) == pytest.approx(checks_capstones.exact_kl(), abs=1e-6)


# --- paired_difference_interval -------------------------------------------------------------------


def interval_unpaired(a, b, confidence=0.95):
    n = len(a)
    mean = statistics.fmean(a) - statistics.fmean(b)
    from scipy.stats import t

    half = t.ppf((1 + confidence) / 2, n - 1) * math.sqrt(statistics.variance(a) / n + statistics.variance(b) / n)
    return mean, mean - half, mean + half


def interval_with_z(a, b, confidence=0.95):
    d = [x - y for x, y in zip(a, b)]
    if len(d) < 2:
        return d[0], -math.inf, math.inf
    from scipy.stats import norm

    half = norm.ppf((1 + confidence) / 2) * statistics.stdev(d) / math.sqrt(len(d))
    return statistics.fmean(d), statistics.fmean(d) - half, statistics.fmean(d) + half


def interval_population_std(a, b, confidence=0.95):
    d = torch.tensor(a) - torch.tensor(b)
    from scipy.stats import t

    half = t.ppf((1 + confidence) / 2, len(d) - 1) * d.std(unbiased=False).item() / math.sqrt(len(d))
    return d.mean().item(), d.mean().item() - half, d.mean().item() + half


def interval_t_with_n_degrees_of_freedom(a, b, confidence=0.95):
    d = [x - y for x, y in zip(a, b)]
    if len(d) < 2:
        return d[0], -math.inf, math.inf
    half = t_quantile((1 + confidence) / 2, len(d)) * statistics.stdev(d) / math.sqrt(len(d))  # the mistake: n, not n − 1
    return statistics.fmean(d), statistics.fmean(d) - half, statistics.fmean(d) + half


def interval_nan_for_one_seed(a, b, confidence=0.95):
    d = torch.tensor(a, dtype=torch.float64) - torch.tensor(b, dtype=torch.float64)
    from scipy.stats import t

    half = t.ppf((1 + confidence) / 2, len(d) - 1) * d.std().item() / math.sqrt(len(d))
    return d.mean().item(), d.mean().item() - half, d.mean().item() + half


@pytest.mark.parametrize("bug, phrase", [
    (interval_unpaired, "unpaired"),
    (interval_with_z, "you used the normal's z"),
    (interval_population_std, "divide by n − 1"),
    (interval_t_with_n_degrees_of_freedom, "t with n degrees of freedom"),
], ids=lambda x: getattr(x, "__name__", ""))
def test_paired_interval_names_each_planted_mistake(bug, phrase):
    fails_with("paired_difference_interval", bug, phrase)


@pytest.mark.filterwarnings("ignore")  # the planted bug takes the std of one number
def test_paired_interval_names_nan_for_one_seed():
    message = fails_with("paired_difference_interval", interval_nan_for_one_seed, "one seed has no spread")
    assert "case 4/4" in message, "the bug is right for two seeds and more"


@pytest.mark.parametrize("p, df", [(0.975, 1), (0.975, 2), (0.95, 2), (0.975, 4), (0.95, 4), (0.1, 4)])
def test_the_checks_closed_form_t_quantiles_are_students(p, df):
    assert checks_capstones.t_quantile_closed_form(p, df) == pytest.approx(t_quantile(p, df), rel=1e-9)


def test_the_paired_solution_is_the_studies_paired_difference_on_the_recorded_runs():
    from rlhf_scratch.course.capstone_kit import recorded_runs

    runs = recorded_runs("compare_sentiment_2026-11-25_3seeds.json")["runs"]
    for metric in ("eval/ref_logprob_per_token_final", "reward_final"):
        a = [runs[f"ppo-s{s}"][metric] for s in (1, 2, 3)]
        b = [runs[f"online_dpo-s{s}"][metric] for s in (1, 2, 3)]
        mean, low, high = paired_difference_interval(a, b)
        ours = paired_difference(a, b)
        assert (mean, high - mean) == pytest.approx((ours.mean, ours.half_width), rel=1e-9)
    # the notebook's reversal, as recorded: seed 1 alone favours Online DPO, three seeds' mean favours PPO, unresolved
    a = [runs[f"ppo-s{s}"]["eval/ref_logprob_per_token_final"] for s in (1, 2, 3)]
    b = [runs[f"online_dpo-s{s}"]["eval/ref_logprob_per_token_final"] for s in (1, 2, 3)]
    mean, low, high = paired_difference_interval(a, b)
    assert a[0] - b[0] < 0 < mean and low < 0 < high
