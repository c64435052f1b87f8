"""Planted mistakes of exercises 06 (`checks_capstones.py`): RLOO's trainer from the contract (each a
`MyRLOOTrainer` with one method written wrong, registered through `entry_of`), a KL estimator graded by the
microscope, a paired interval over seeds. Each is the solution with one classic mistake, as a learner writes it.
"""

import math
import statistics

import torch

from rlhf_scratch.config import registry
from rlhf_scratch.course.planted import Planted
from rlhf_scratch.course.solutions_capstones import MyRLOOArgs, MyRLOOTrainer

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
    from scipy.stats import t

    half = t.ppf((1 + confidence) / 2, len(d)) * statistics.stdev(d) / math.sqrt(len(d))  # the mistake: n, not n − 1
    return statistics.fmean(d), statistics.fmean(d) - half, statistics.fmean(d) + half


def interval_nan_for_one_seed(a, b, confidence=0.95):
    d = torch.tensor(a, dtype=torch.float64) - torch.tensor(b, dtype=torch.float64)
    from scipy.stats import t

    half = t.ppf((1 + confidence) / 2, len(d) - 1) * d.std().item() / math.sqrt(len(d))
    return d.mean().item(), d.mean().item() - half, d.mean().item() + half

class OneGeneration(MyRLOOTrainer):
    generations = staticmethod(lambda args: 1)  # one completion per prompt: no other to leave out


def registered_under_another_name(name="my_rloo"):
    return registry.Algorithm("rloo2", "x", args=MyRLOOArgs, trainer=MyRLOOTrainer)


P = Planted
PLANTED: tuple[Planted, ...] = (
    P("make_rloo_algorithm", "own-sample-in-baseline", entry_of(OwnSampleInBaseline),
      "the baseline includes the completion's own reward"),
    P("make_rloo_algorithm", "wrong-group-axis", entry_of(WrongGroupAxis), "wrong group axis"),
    P("make_rloo_algorithm", "no-g-minus-one", entry_of(NoDivisionByGMinusOne), "no /(G − 1)"),
    P("make_rloo_algorithm", "no-kl-in-reward", entry_of(NoKLInTheReward), "the KL is missing from the reward"),
    P("make_rloo_algorithm", "kl-averaged", entry_of(KLAveragedOverTokens), "the KL AVERAGED over the completion's tokens"),
    P("make_rloo_algorithm", "ratio-from-mean", entry_of(RatioFromTheMeanLogRatio),
      "the ratio from the MEAN per-token log-ratio"),
    P("make_rloo_algorithm", "minimised", entry_of(Minimised), "the objective was minimised"),
    P("make_rloo_algorithm", "unclipped", entry_of(Unclipped), "the clip is missing"),
    P("make_rloo_algorithm", "another-name", registered_under_another_name, "use the `name` argument"),
    P("make_rloo_algorithm", "one-generation", entry_of(OneGeneration), "define the static method `generations(args)`"),
    P("calc_k3_kl", "k2", k3_as_k2, "that is k2", also=("biased by",)),
    P("calc_k3_kl", "ratio-upside-down", k3_inverted_ratio, "the ratio is upside down"),
    P("calc_k3_kl", "minus-one-missing", k3_without_the_minus_one, "the −1 is missing", also=("biased by",)),
    P("calc_k3_kl", "k1", k1_for_k3, "that is k1", also=("case 2/2", "your estimator is unbiased")),
    P("paired_difference_interval", "unpaired", interval_unpaired, "unpaired"),
    P("paired_difference_interval", "z", interval_with_z, "you used the normal's z"),
    P("paired_difference_interval", "population-std", interval_population_std, "divide by n − 1"),
    P("paired_difference_interval", "t-with-n-dof", interval_t_with_n_degrees_of_freedom, "t with n degrees of freedom"),
    P("paired_difference_interval", "nan-for-one-seed", interval_nan_for_one_seed, "one seed has no spread",
      also=("case 4/4",)),
)
"""Exercises 06's planted mistakes (`course.mistakes.Planted`)."""
