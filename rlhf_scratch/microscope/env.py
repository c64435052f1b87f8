"""The environment small enough to enumerate: a tabular autoregressive policy over a tiny vocabulary.

    vocabulary   V tokens: EOS (id 0) and V − 1 words a, b, c, …
    prompts      X one-token prompts x (drawn uniformly), so a batch can hold groups of different
                 prompts, as GRPO's does (and its std scaling can weigh them differently)
    completion   y = y_1 … y_|y|: words, ended by EOS (kept, as the package's completion mask keeps
                 it) or cut at max_len tokens. Every one is listed: Σ_{l=1}^{L} (V−1)^{l−1} that end
                 at EOS plus (V−1)^L cut ones per prompt (V = 5, L = 5: 341 + 1,024 = 1,365).
    policy       θ[p, :] = the logits of the next token after prefix p = (x, y_1 … y_t), one row per
                 prompt and word prefix shorter than L (P = X Σ_{l<L} (V−1)^l rows):
                 π(y | x) = Π_t softmax(θ[(x, y_<t)])[y_t].

A completion is laid out as the package lays out a rollout, with a one-token prompt:
`tokens = [x, y_1 … y_L]` (padding after EOS), `prefix_len = 1`, and the logits at position t are
the row of the prefix (x, y_1 … y_t) (`idx[:, t]`); positions after the end read an extra "pad"
row P, which is not a parameter: an estimator that leaks gradient into it is caught (`pad_leak`).
A row's probability is q(x, y) = π(y | x) / X (`probabilities`).

Every log-probability is the package's own: `objectives.get_log_probs` (with `temperature_scaled`)
on the gathered logits, summed by `objectives.sequence_log_probs`. So log π(y), J(θ) = Σ_y π(y) r(y),
KL(π ‖ π_ref) = Σ_y π(y) log π(y)/π_ref(y) and E[|y|] are exact sums over the list, and their
gradients come from autograd.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from rlhf_scratch.core.objectives import get_log_probs, sequence_log_probs
from rlhf_scratch.reward.verifiable import accuracy_reward, format_reward

EOS = 0
RIGHT = 1  # the right answer of the right/wrong reward: the first token is "a" (for every prompt)
REWARDS = ("correct", "length", "sentiment")
RULE_REWARDS = ("accuracy", "format")
"""The rule rewards of prompts with a ground truth (`reward.verifiable`): the arithmetic environment's."""
WORDS = "abcdefghijklmnopqrstuvwxyz"


@dataclass(frozen=True)
class Completions:
    """A list of completions in the rollout layout (rows can be picked: `comps[rows]`)."""

    tokens: Int[Tensor, "n seq"]
    """[x, y_1 … y_L] with 0 after the end (seq = max_len + 1; the prompt x is never scored)."""
    mask: Bool[Tensor, "n gen"]
    """True up to and including EOS (the package's completion mask); gen = max_len."""
    idx: Int[Tensor, "n seq"]
    """The table row whose logits sit at each position: the prefix (x, y_1 … y_t), or the pad row after the end."""
    lengths: Int[Tensor, " n"]
    """|y|: kept tokens, EOS included (TRL's completions/mean_length)."""

    def __len__(self) -> int:
        return self.tokens.shape[0]

    def __getitem__(self, rows: Tensor | slice) -> Completions:
        return Completions(self.tokens[rows], self.mask[rows], self.idx[rows], self.lengths[rows])

    @property
    def prompt(self) -> Int[Tensor, " n"]:
        return self.tokens[:, 0]

    @property
    def first(self) -> Int[Tensor, " n"]:
        return self.tokens[:, 1]


@dataclass(frozen=True)
class Environment:
    """Every completion of every prompt, a V-token vocabulary up to max_len tokens, and the table's layout."""

    vocab: int
    max_len: int
    num_prompts: int
    completions: Completions
    prefixes: tuple[tuple[int, ...], ...]
    """Row p of θ is the prefix `prefixes[p]` = (x, words …); the roots (x,) come first, one per prompt."""
    words: str = WORDS
    """The text of tokens 1 … V−1 (letters here; the digits 0 … 9 in `microscope.arithmetic`)."""
    ground_truth: tuple[str, ...] = ()
    """Each prompt's answer where a rule scores it (`microscope.arithmetic`: "14" for 5+9=); empty here."""
    prompt_text: tuple[str, ...] = ()
    """Each prompt as text where it has one ("5+9="); empty here."""

    @property
    def num_prefixes(self) -> int:
        return len(self.prefixes)

    @property
    def pad_row(self) -> int:
        return len(self.prefixes)

    @property
    def num_params(self) -> int:
        return self.num_prefixes * self.vocab

    def text(self, row: int) -> str:
        """A completion as text: its words, then '.' for EOS (cut ones end without it)."""
        n = int(self.completions.lengths[row])
        return "".join("." if int(t) == EOS else self.words[int(t) - 1] for t in self.completions.tokens[row, 1 : n + 1])

    def decoded(self, comps: Completions | None = None) -> list[str]:
        """Each completion's text as the rollout hands it to a reward function: its words, EOS not in it."""
        comps = self.completions if comps is None else comps
        return ["".join(self.words[t - 1] for t in row[1 : n + 1] if t != EOS)
                for row, n in zip(comps.tokens.tolist(), comps.lengths.tolist())]

    def right(self, comps: Completions | None = None) -> Bool[Tensor, " n"]:
        """Which completions are right answers: the first token is "a" (`reward_correct`), or, where a rule
        scores the prompts (`ground_truth`), the accuracy reward is 1."""
        comps = self.completions if comps is None else comps
        if self.ground_truth:
            return rewards_of(self, "accuracy", comps) == 1
        return comps.first == RIGHT

    def right_first(self, x: int) -> int:
        """The first token of prompt x's right answer ("a", or the ground truth's first digit)."""
        return self.words.index(self.ground_truth[x][0]) + 1 if self.ground_truth else RIGHT

    def param_rows(self, keep) -> Bool[Tensor, " params"]:
        """A mask of θ's parameters (flattened [prefixes · vocab]): the rows whose prefix satisfies `keep`."""
        rows = torch.tensor([bool(keep(p)) for p in self.prefixes])
        return rows[:, None].expand(-1, self.vocab).flatten()


def make_environment(vocab: int, max_len: int, num_prompts: int = 1) -> Environment:
    """List every completion of every prompt (by prompt, then length, then lexicographically) and
    number the prefixes (the roots first)."""
    if vocab < 2 or max_len < 1 or num_prompts < 1:
        raise ValueError(f"make_environment: needs vocab >= 2, max_len >= 1, num_prompts >= 1; got {vocab}, {max_len}, {num_prompts}")
    words = range(1, vocab)
    prefixes = [(x, *p) for n in range(max_len) for x in range(num_prompts) for p in itertools.product(words, repeat=n)]
    row_of = {p: i for i, p in enumerate(prefixes)}
    ends = [(*p, EOS) for n in range(max_len) for p in itertools.product(words, repeat=n)]
    ends += list(itertools.product(words, repeat=max_len))  # cut at max_len, no EOS
    seqs = [(x, s) for x in range(num_prompts) for s in ends]
    n, L = len(seqs), max_len
    tokens = torch.zeros(n, L + 1, dtype=torch.long)
    idx = torch.full((n, L + 1), len(prefixes), dtype=torch.long)
    lengths = torch.tensor([len(s) for _, s in seqs])
    for i, (x, s) in enumerate(seqs):
        tokens[i, 0] = x
        tokens[i, 1 : len(s) + 1] = torch.tensor(s)
        for t in range(len(s)):
            idx[i, t] = row_of[(x, *s[:t])]
    mask = torch.arange(L)[None, :] < lengths[:, None]
    return Environment(vocab, max_len, num_prompts, Completions(tokens, mask, idx, lengths), tuple(prefixes))


# --- rewards: one number per completion -----------------------------------------------------------


def reward_correct(comps: Completions) -> Float[Tensor, " n"]:
    """Right/wrong, blind to length: r = 1 if the first token is the right answer ("a"), else 0."""
    return (comps.first == RIGHT).float()


def reward_length(comps: Completions, max_len: int) -> Float[Tensor, " n"]:
    """Pays for length: r = |y| / max_len."""
    return comps.lengths.float() / max_len


def token_valence(vocab: int) -> Float[Tensor, " vocab"]:
    """A sentiment-like valence per token: EOS 0, then words +1, −1, +½, −½, +⅓, −⅓, …"""
    v = [0.0] + [(1 if w % 2 == 0 else -1) / (w // 2 + 1) for w in range(vocab - 1)]
    return torch.tensor(v)


def reward_sentiment(comps: Completions, vocab: int) -> Float[Tensor, " n"]:
    """A classifier-like score in (0, 1): r = σ(Σ_t valence(y_t)) over the kept tokens."""
    v = token_valence(vocab)[comps.tokens[:, 1:]]
    return torch.sigmoid(torch.where(comps.mask, v, torch.zeros_like(v)).sum(-1))


def reward_rule(env: Environment, comps: Completions, reward: str) -> Float[Tensor, " n"]:
    """The package's rule rewards (`reward.verifiable`, TRL's contract) on each completion's decoded text
    and its prompt's ground truth: `accuracy_reward` (1 for the right integer, written one way only) or
    `format_reward` (1 for any integer so written)."""
    texts = env.decoded(comps)
    if reward == "accuracy":
        truth = [env.ground_truth[x] for x in comps.prompt.tolist()]
        return torch.tensor(accuracy_reward(completions=texts, ground_truth=truth))
    return torch.tensor(format_reward(completions=texts))


def rewards_of(env: Environment, reward: str, comps: Completions | None = None) -> Float[Tensor, " n"]:
    """The named reward of `comps` (default: every completion)."""
    comps = env.completions if comps is None else comps
    if reward in RULE_REWARDS:
        if not env.ground_truth:
            raise ValueError(f"reward: {reward} needs prompts with a ground truth (the arithmetic environment)")
        return reward_rule(env, comps, reward)
    if reward == "correct":
        return reward_correct(comps)
    if reward == "length":
        return reward_length(comps, env.max_len)
    if reward == "sentiment":
        return reward_sentiment(comps, env.vocab)
    raise ValueError(f"reward: must be one of {', '.join(REWARDS + RULE_REWARDS)}; got {reward!r}")


# --- policies ---------------------------------------------------------------------------------------


def make_policies(
    env: Environment, seed: int, p_right: tuple[float, ...], ref_scale: float = 1.0, drift: float = 0.5
) -> tuple[Float[Tensor, "prefixes vocab"], Float[Tensor, "prefixes vocab"]]:
    """(θ, θ_ref): θ_ref ~ N(0, ref_scale²) per logit, θ = θ_ref + N(0, drift²), both seeded; then
    θ's root row of prompt x is set so that its first token is the right answer with probability
    `p_right[x]` (`set_p_right`). π ≠ π_ref, so the KL terms have gradients."""
    theta, theta_ref = random_tables(env, seed, ref_scale, drift)
    return set_p_right(theta, p_right), theta_ref


def random_tables(
    env: Environment, seed: int, ref_scale: float = 1.0, drift: float = 0.5
) -> tuple[Float[Tensor, "prefixes vocab"], Float[Tensor, "prefixes vocab"]]:
    """(θ, θ_ref) before any row is set: θ_ref ~ N(0, ref_scale²) per logit, θ = θ_ref + N(0, drift²), seeded."""
    g = torch.Generator().manual_seed(seed)
    theta_ref = ref_scale * torch.randn(env.num_prefixes, env.vocab, generator=g)
    theta = theta_ref + drift * torch.randn(env.num_prefixes, env.vocab, generator=g)
    return theta, theta_ref


def set_p_right(theta: Float[Tensor, "prefixes vocab"], p_right: tuple[float, ...]) -> Float[Tensor, "prefixes vocab"]:
    """θ with each prompt's root-row logit of the right answer moved so that π(y_1 = a | x) = p_right[x]:
    z_a = log(p / (1 − p)) + logsumexp of the other root logits. Nothing else changes."""
    theta = theta.clone()
    for x, p in enumerate(p_right):  # the roots are rows 0 … X−1
        others = torch.cat([theta[x, :RIGHT], theta[x, RIGHT + 1 :]])
        theta[x, RIGHT] = math.log(p / (1 - p)) + others.logsumexp(0)
    return theta


def with_pad_row(theta: Float[Tensor, "prefixes vocab"], reference: bool = False) -> Float[Tensor, "rows vocab"]:
    """θ with the pad row appended: the logits read at positions after a completion's end. The
    policy's is 0, the reference's a ramp from −1 to 1, so that a KL term that forgets the mask
    has a gradient there (and `pad_leak` shows it) instead of comparing two equal rows."""
    pad = torch.linspace(-1, 1, theta.shape[1]) if reference else theta.new_zeros(theta.shape[1])
    return torch.cat([theta, pad[None]])


def top_k_logits(logits: Float[Tensor, "*shape vocab"], k: int) -> Float[Tensor, "*shape vocab"]:
    """The logits of the distribution top-k sampling draws from: the k largest kept, the rest −inf
    (`generation.sample_next_token` draws among the k largest, the same distribution). k = 0: all."""
    if k <= 0 or k >= logits.shape[-1]:
        return logits
    kth = logits.topk(k, dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth, float("-inf"))


def gathered_logits(
    theta: Float[Tensor, "prefixes vocab"], comps: Completions, reference: bool = False
) -> Float[Tensor, "n seq vocab"]:
    """The logits at every position of every completion: θ (with the pad row) gathered by prefix."""
    return with_pad_row(theta, reference)[comps.idx]


def token_log_probs(
    logits: Float[Tensor, "n seq vocab"], comps: Completions, temperature: float = 1.0, top_k: int = 0
) -> Float[Tensor, "n gen"]:
    """log π_{T,k}(y_t | y_<t) of every token: `get_log_probs` on the (top-k) logits at temperature T."""
    return get_log_probs(top_k_logits(logits, top_k), comps.tokens, prefix_len=1, temperature=temperature)


def log_probs(
    theta: Float[Tensor, "prefixes vocab"], comps: Completions, temperature: float = 1.0, top_k: int = 0
) -> Float[Tensor, " n"]:
    """log π(y) of every completion: `sequence_log_probs` of `token_log_probs` (−inf outside top-k's support)."""
    return sequence_log_probs(token_log_probs(gathered_logits(theta, comps), comps, temperature, top_k), comps.mask)


def prefix_values(
    env: Environment, theta: Float[Tensor, "prefixes vocab"], rewards: Float[Tensor, " n"],
    pi: Float[Tensor, " n"] | None = None,
) -> Float[Tensor, " rows"]:
    """The exact value of every prefix, V(p) = E_π[r | the completion starts with p] = Σ_{y ⊇ p} π(y|x) r(y) / π(p|x),
    and 0 for the pad row (a state after the end has no future). `pi`: π(y|x) of every completion where
    the distribution is not θ's softmax (a sampler's: `offpolicy`)."""
    with torch.no_grad():
        pi = (log_probs(theta, env.completions).exp() if pi is None else pi).double()
    comps = env.completions
    rows = comps.idx[:, :-1][comps.mask]  # every (completion, prefix it passes through)
    owner = torch.arange(len(comps))[:, None].expand_as(comps.mask)[comps.mask]
    reach = torch.zeros(env.num_prefixes + 1, dtype=torch.float64).index_add_(0, rows, pi[owner])
    paid = torch.zeros_like(reach).index_add_(0, rows, (pi * rewards.double())[owner])
    values = torch.where(reach > 0, paid / reach.clamp(min=1e-300), torch.zeros_like(reach))
    values[env.pad_row] = 0.0
    return values.float()


def probabilities(
    env: Environment, theta: Float[Tensor, "prefixes vocab"], temperature: float = 1.0, top_k: int = 0
) -> Float[Tensor, " n"]:
    """q(x, y) = π_{T,k}(y | x) / X of every row, no gradient: the distribution one sampled completion comes from."""
    with torch.no_grad():
        return log_probs(theta, env.completions, temperature, top_k).exp() / env.num_prompts
