"""The rollout every algorithm starts from: sample, score with the policy and the reference, reward.

    prompts (one per group) ──repeat G times──► left-padded prompt_ids
        ──generate (KV cache, top-k, EOS)──► completion_ids, completion_mask     generate_sequences
        ──policy forward──► log π_old(o_t)  [and V(s_t) for PPO]                 compute_log_prob
        ──reference forward──► log π_ref(o_t), per-token KL(π_old‖π_ref), entropy
        ──reward function──► scores; rewards = scores − missing_eos_penalty·[no EOS]   compute_scores

Each arrow group is one function, named as verl names the role that runs it; `make_rollout` is
the three in order (the trainer's role methods of the same names call them one at a time).

Every log-prob, KL and entropy here is of the distribution that was sampled, softmax(z / T)
(`objectives.temperature_scaled`), and the learning phase scores with the same T (the rollout
remembers it: `Rollout.temperature`), so at the first step log π = log π_old and the ratio is 1.
With --bf16 the policy's scoring forward runs under the same autocast as the learning forward
(`policy_precision`): old and new log-probs then round alike, and a ratio is never ≠ 1 from
rounding alone.

PPO uses G = 1 (one completion per prompt), RLOO G completions per prompt, Online DPO G = 2
(a pair). The G completions of one prompt are consecutive in the batch (prompt-major).

Only per-token numbers are kept: the forward passes run in chunks of rows, stop at the final
normalised residual ĥ, and `token_terms` reduces its logits a chunk of positions at a time, so
the rollout's memory grows with the chunk, not with the batch times the vocabulary. (At the gpt2
preset an early design kept 128 × 30 × 50,257 × 4 B ≈ 0.77 GB of reference logits for the whole
phase.) PPO may keep the reference's ĥ (`keep_ref_hidden`: d_model numbers per position) for its
full-vocabulary KL.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor
from transformer_lens import HookedTransformer

from rlhf_scratch.core.objectives import generated_span, sequence_log_probs
from rlhf_scratch.core.timing import timed
from rlhf_scratch.core.vocab_terms import LOGITS_PER_CHUNK, TokenTerms, token_terms, unembedding
from rlhf_scratch.models.fast_forward import HiddenForward, final_hidden
from rlhf_scratch.models.policy import Policy, as_reference, language_model
from rlhf_scratch.models.static_cache import DecoderCache
from rlhf_scratch.rollout.generation import (
    attention_mask_or_none,
    decode_completions,
    eos_token_ids,
    generate,
    is_eos,
    kept_token_ids,
    tokenize_prompts,
)
from rlhf_scratch.rollout.reward_call import environment_scores, score_completions
from rlhf_scratch.rollout.rl_dataset import prompt_columns


@dataclass(kw_only=True)
class Rollout:
    """One phase's samples and everything the learning phase needs about them (no gradients).
    `generate_sequences` fills the samples; `compute_log_prob` the log-probs, KL, entropy and values;
    `compute_scores` the scores and rewards (None until then)."""

    prompt_ids: Int[Tensor, "batch prompt_len"]
    """Left-padded prompt tokens (BOS first when prepend_bos; through the chat template when the
    model has one: `generation.prompt_tokens`)."""
    completion_ids: Int[Tensor, "batch gen_len"]
    """Sampled tokens; pad tokens after the first EOS when generation stops at EOS."""
    attention_mask: Bool[Tensor, "batch seq_len"]
    """False on the prompt's left padding, True elsewhere (seq_len = prompt_len + gen_len)."""
    completion_mask: Bool[Tensor, "batch gen_len"]
    """True for the tokens the policy chose (up to and including the first EOS when stopping)."""
    logprobs: Float[Tensor, "batch gen_len"] | None = None
    """log π_old(o_t | q, o_<t) of each completion token, from the policy that sampled it, at the
    sampling temperature (every log-prob, KL and entropy of a rollout is of softmax(z / T))."""
    ref_logprobs: Float[Tensor, "batch gen_len"] | None = None
    """log π_ref(o_t | q, o_<t) from the frozen reference model; None when the rollout was made
    without one (`ref_model=None`: GRPO at β = 0 runs no reference forward)."""
    kl: Float[Tensor, "batch gen_len"] | None = None
    """KL(π_old ‖ π_ref) over the full vocabulary at each completion position (a diagnostic);
    None without a reference."""
    entropy: Float[Tensor, "batch gen_len"] | None = None
    """Entropy of π_old at each completion position, nats (a diagnostic)."""
    scores: Float[Tensor, " batch"] | None = None
    """What the reward function returned."""
    rewards: Float[Tensor, " batch"] | None = None
    """scores − missing_eos_penalty for each completion without EOS (= scores without a penalty)."""
    prompts: list[str]
    """The prompt of each completion (each repeated num_generations times), as given: the plain
    text, not its chat-template rendering (that is in `prompt_ids`)."""
    completions: list[str]
    """The text of each completion (without the EOS that ended it)."""
    num_generations: int
    """G: consecutive completions per prompt."""
    eos_token_id: int | tuple[int, ...]
    """The token, or each of the tokens, that ends a completion (`generation.eos_token_ids`: the
    model's generation config's, e.g. ChatML's `<|im_end|>`, else the tokenizer's EOS)."""
    values: Float[Tensor, "batch seq_len"] | None = None
    """V(s_t) at every position: the output of the policy's extras, when it has them (PPO's critic)."""
    ref_hidden: Float[Tensor, "batch gen_len d_model"] | None = None
    """The reference's final normalised residual ĥ_ref at each position that predicts a completion
    token, when asked for (`keep_ref_hidden`): PPO's full-vocabulary KL then unembeds it (a chunk
    at a time) instead of running a reference forward per minibatch, for batch × gen_len × d_model
    floats of memory (the whole log-prob vectors would be d_vocab floats per position: 64× more
    at the tiny preset)."""
    ref_lse: Float[Tensor, "batch gen_len"] | None = None
    """logsumexp of the reference's logits z_ref / T at the same positions, kept with `ref_hidden`:
    with it the learning phase's KL needs no reference logits at all (`token_terms(ref_lse=...)`)."""
    temperature: float = 1.0
    """T the completions were sampled at: every log-prob of them, old and new, is of softmax(z / T)."""
    verdicts: Int[Tensor, " batch"] | None = None
    """A judge's verdict on each row's pair (0: the first completion wins, 1: the second, −1:
    undecided), on both rows of the pair; None when no judge scored the rollout (Online DPO's)."""
    # An episode's record, None without --env (`episodes.episode_columns`): the environment's reward (NaN where it
    # gave none: `compute_scores` takes it as the score where it is a number), the model's turns, the tool calls and
    # errors (None where the environment does not count them), the environment's tokens (the model's: `lengths`).
    env_rewards: Float[Tensor, " batch"] | None = None
    num_turns: Int[Tensor, " batch"] | None = None
    tool_calls: Int[Tensor, " batch"] | None = None
    tool_errors: Int[Tensor, " batch"] | None = None
    env_tokens: Int[Tensor, " batch"] | None = None

    def __len__(self) -> int:
        return self.completion_ids.shape[0]

    @property
    def prefix_len(self) -> int:
        """Length of the (padded) prompt: the completion is `sample_ids[:, prefix_len:]`."""
        return self.prompt_ids.shape[1]

    @property
    def sample_ids(self) -> Int[Tensor, "batch seq_len"]:
        return torch.cat([self.prompt_ids, self.completion_ids], dim=1)

    @property
    def is_terminated(self) -> Bool[Tensor, " batch"]:
        """Whether each completion produced EOS, any of `eos_token_id` (the completion only — an
        EOS/BOS in the prompt does not count)."""
        return (is_eos(self.completion_ids, self.eos_token_id) & self.completion_mask).any(dim=-1)

    @property
    def lengths(self) -> Int[Tensor, " batch"]:
        return self.completion_mask.sum(dim=-1)

    @property
    def texts(self) -> list[str]:
        return [p + c for p, c in zip(self.prompts, self.completions)]


@torch.no_grad()
def score_tokens(
    policy: Policy,
    ref_model: HookedTransformer | None,
    sample_ids: Int[Tensor, "batch seq_len"],
    attention_mask: Bool[Tensor, "batch seq_len"],
    prefix_len: int,
    chunk_size: int,
    keep_ref_hidden: bool = False,
    temperature: float = 1.0,
    policy_precision: Callable[[], AbstractContextManager] = nullcontext,
    chunk_logits: int = LOGITS_PER_CHUNK,
    ref_hidden: Float[Tensor, "batch gen_len d_model"] | None = None,
) -> dict[str, Tensor]:
    """Per-token log π, log π_ref, KL, entropy (and values) of the completions, `chunk_size` rows
    at a time (their logits `chunk_logits` at a time, `token_terms`); with `keep_ref_hidden`,
    also the reference's ĥ_ref and the logsumexp of its logits. With `ref_model=None` the reference forward is skipped (no
    ref_logprobs, kl or ref_hidden). `ref_hidden` given (`reference_hidden`'s, run before: the
    single controller's compute_ref_log_prob) stands in for the reference forward, row for row.

    Every distribution is at `temperature` (`temperature_scaled`), the one the tokens were drawn
    from. The policy's forward and unembedding run inside `policy_precision()` — the learning
    phase's autocast under --bf16 — so that log π_old is computed as log π will be; the reference
    stays float32 (the same number in every phase, and it enters no ratio)."""
    out: dict[str, list[Tensor]] = {"logprobs": [], "ref_logprobs": [], "kl": [], "entropy": [], "values": [],
                                     "ref_hidden": [], "ref_lse": []}
    span = generated_span(prefix_len)
    lm = language_model(policy)
    given = ref_hidden
    for start in range(0, sample_ids.shape[0], chunk_size):
        ids, mask = sample_ids[start : start + chunk_size], attention_mask[start : start + chunk_size]
        tl_mask, targets = attention_mask_or_none(mask, of=attention_mask), ids[:, prefix_len:]
        ref_hidden = None
        if ref_model is not None:
            ref_hidden = _reference_forward(ref_model, ids, tl_mask, span) if given is None else given[start : start + chunk_size]
            if keep_ref_hidden:
                out["ref_hidden"].append(ref_hidden)
        with timed("policy_forward"), policy_precision():
            if isinstance(policy, HookedTransformer):
                hidden = final_hidden(policy, ids, tl_mask)
            else:  # a policy with extras: ĥ and their output at every position, one forward
                hidden, values = policy(ids, attention_mask=tl_mask, return_hidden=True)
                out["values"].append(values.float())
            terms = token_terms(
                hidden[:, span].flatten(0, 1), unembedding(lm), targets.flatten(), temperature,
                ref_hidden=None if ref_hidden is None else ref_hidden.flatten(0, 1),
                ref_unembed=None if ref_model is None else unembedding(ref_model), with_entropy=True,
                chunk_logits=chunk_logits,
            ).reshape(*targets.shape)
        out["logprobs"].append(terms.logprobs)
        out["entropy"].append(terms.entropy)
        if ref_model is not None:
            out["ref_logprobs"].append(terms.ref_logprobs)
            out["kl"].append(terms.kl)
            if keep_ref_hidden:
                out["ref_lse"].append(terms.ref_lse)
    return {k: torch.cat(v) for k, v in out.items() if v}


def _reference_forward(ref_model: HookedTransformer, ids: Tensor, tl_mask: Tensor | None, span: slice) -> Tensor:
    """ĥ_ref of one chunk of rows at the positions that predict a completion token."""
    with timed("reference_forward"), as_reference(ref_model):  # an adapted LM: its adapters off
        return final_hidden(ref_model, ids, tl_mask)[:, span]


@torch.no_grad()
def reference_hidden(
    ref_model: HookedTransformer, rollout: Rollout, chunk_size: int
) -> Float[Tensor, "batch gen_len d_model"]:
    """`score_tokens`' reference forward alone, in the same chunks of rows: ĥ_ref at every position
    that predicts a completion token (verl's compute_ref_log_prob; the log-probs and the full-vocabulary
    KL are then unembedded beside the policy's, `score_tokens(ref_hidden=...)`)."""
    span, ids, mask = generated_span(rollout.prefix_len), rollout.sample_ids, rollout.attention_mask
    return torch.cat([_reference_forward(ref_model, ids[s : s + chunk_size], attention_mask_or_none(mask[s : s + chunk_size], of=mask), span)
                      for s in range(0, len(rollout), chunk_size)])


@torch.no_grad()
def policy_values(
    policy: Policy, rollout: Rollout, chunk_size: int, policy_precision: Callable[[], AbstractContextManager] = nullcontext
) -> Float[Tensor, "batch seq_len"]:
    """V(s_t) at every position from a policy with extras (PPO's value head on its trunk): `score_tokens`'
    policy forward for the values alone, in the same chunks and precision (verl's compute_values; a
    second forward of the trunk when `score_tokens` scored the LM without its extras)."""
    ids, mask, values = rollout.sample_ids, rollout.attention_mask, []
    for s in range(0, len(rollout), chunk_size):
        with timed("policy_forward"), policy_precision():
            values.append(policy(ids[s : s + chunk_size], attention_mask=attention_mask_or_none(mask[s : s + chunk_size], of=mask),
                                 return_hidden=True)[1].float())
    return torch.cat(values)


@torch.no_grad()
def generate_sequences(
    lm: HookedTransformer,
    prompts: list[str],
    *,
    num_generations: int = 1,
    gen_len: int,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    prepend_bos: bool = True,
    stop_at_eos: bool = False,
    kv_cache: str = "auto",
    cuda_graph: bool = True,
    decoders: DecoderCache | None = None,
) -> Rollout:
    """`num_generations` completions of each prompt, sampled from `lm` (verl's generate_sequences):
    a `Rollout` with its samples and their text, not yet scored (`compute_log_prob`) nor rewarded
    (`compute_scores`). An instruct model is prompted through its chat template
    (`generation.tokenize_prompts`) and stops at its generation config's EOS; the completions' text
    is the generated tokens only, without the EOS that ended them (`decode_completions`)."""
    group_prompts = [p for p in prompts for _ in range(num_generations)]
    prompt_ids, prompt_mask = tokenize_prompts(lm, group_prompts, prepend_bos)
    with timed("generation"):
        completion_ids, completion_mask = generate(
            lm, prompt_ids, prompt_mask, gen_len, temperature, top_k, stop_at_eos, kv_cache=kv_cache, cuda_graph=cuda_graph,
            top_p=top_p, decoders=decoders,
        )
    with timed("reward"):  # decoding is the reward's part of the clock (timing.PARTS)
        completions = decode_completions(lm, completion_ids, completion_mask, stop_at_eos)  # one read of the device
    return Rollout(
        prompt_ids=prompt_ids, completion_ids=completion_ids, completion_mask=completion_mask,
        attention_mask=torch.cat([prompt_mask, torch.ones_like(completion_mask)], dim=1),
        prompts=group_prompts, completions=completions, num_generations=num_generations,
        eos_token_id=eos_token_ids(lm), temperature=temperature,
    )


@torch.no_grad()
def compute_log_prob(
    policy: Policy,
    ref_model: HookedTransformer | None,
    rollout: Rollout,
    *,
    chunk_size: int = 16,
    keep_ref_hidden: bool = False,
    policy_precision: Callable[[], AbstractContextManager] = nullcontext,
    chunk_logits: int = LOGITS_PER_CHUNK,
    ref_hidden: Float[Tensor, "batch gen_len d_model"] | None = None,
    with_values: bool = True,
) -> Rollout:
    """Score the rollout's completions (verl's compute_log_prob, its reference and its values in
    one call, as the blog's value head shares the policy's trunk): `score_tokens` fills log π_old,
    the entropy, and with a reference log π_ref and the per-token KL (PPO: V(s_t); with
    `keep_ref_hidden`, ĥ_ref and its logsumexp). Returns the same rollout, filled in.
    Taken apart as verl's three calls: `ref_hidden` from `reference_hidden`, `with_values=False`
    (the LM alone, no extras), and `policy_values` for V."""
    scored = score_tokens(policy if with_values else language_model(policy), ref_model, rollout.sample_ids,
                          rollout.attention_mask, rollout.prefix_len, chunk_size, keep_ref_hidden, rollout.temperature,
                          policy_precision, chunk_logits, ref_hidden)
    rollout.logprobs, rollout.entropy = scored["logprobs"], scored["entropy"]
    rollout.ref_logprobs, rollout.kl = scored.get("ref_logprobs"), scored.get("kl")
    rollout.values = scored.get("values") if with_values else rollout.values
    rollout.ref_hidden, rollout.ref_lse = scored.get("ref_hidden"), scored.get("ref_lse")
    return rollout


@torch.no_grad()
def compute_scores(rollout: Rollout, reward_fn, missing_eos_penalty: float | None = None,
                   overlong: OverlongBuffer | None = None) -> Rollout:
    """Reward the rollout's completions (verl's compute_rm_score and the driver's reward shaping):
    `reward_fn` (either contract of `rollout.reward_call.score_completions`) gives the scores, except
    for an episode whose environment owns its reward (`Rollout.env_rewards`: `environment_scores`);
    rewards = scores − missing_eos_penalty for each completion without EOS, + the soft overlong
    punishment (`overlong`: `penalised_rewards`). Returns the same rollout.
    A TRL-style reward also gets the columns each prompt carries (`rl_dataset.prompt_columns`: the
    arithmetic task's `ground_truth`), one entry per completion, as TRL passes a dataset's columns."""
    with timed("reward"):
        owned = rollout.env_rewards
        if owned is not None and not owned.isnan().any():  # the environment scored every episode
            rollout.scores = owned.clone()
        else:
            rollout.scores = environment_scores(score_completions(
                reward_fn, rollout.prompts, rollout.completions,
                kept_token_ids(rollout.completion_ids, rollout.completion_mask), **prompt_columns(rollout.prompts),
            ).to(rollout.completion_ids.device), owned)
    rollout.rewards = penalised_rewards(rollout, missing_eos_penalty, overlong)
    return rollout


def penalised_rewards(rollout: Rollout, missing_eos_penalty: float | None,
                      overlong: OverlongBuffer | None = None) -> Float[Tensor, " batch"]:
    """rewards = scores − missing_eos_penalty for each completion without EOS, + the soft overlong
    punishment of its length (`soft_overlong_punishment`, with `overlong`); the scores themselves
    without either: `compute_scores`' shaping, and the single controller driver's after its reward model scored."""
    rewards = rollout.scores
    if missing_eos_penalty:
        rewards = rewards - missing_eos_penalty * (~rollout.is_terminated).float()
    if overlong is not None:
        rewards = rewards + overlong.punishment(rollout.lengths)
    return rewards


def soft_overlong_punishment(
    lengths: Int[Tensor, " batch"], max_len: int, buffer_len: int, penalty_factor: float = 1.0
) -> Float[Tensor, " batch"]:
    """DAPO's soft overlong punishment (Yu et al. 2025, eq. 13; TRL's `get_soft_overlong_punishment`,
    verl's reward_model.overlong_buffer): nothing up to max_len − buffer_len tokens, then a penalty
    growing linearly to −penalty_factor at max_len, added to the reward:

        R_length(|y|) = 0                                              |y| <= L_max − L_cache
                      = −penalty_factor · (|y| − (L_max − L_cache)) / L_cache     otherwise

    L_max = `max_len` (verl's max_response_length, TRL's max_completion_len: here --gen-len),
    L_cache = `buffer_len` (verl's overlong_buffer.len, TRL's soft_punish_cache). A completion
    cut at L_max without EOS gets the whole −penalty_factor (no completion here is longer than L_max).

        max_len 10, buffer_len 4, factor 1:   |y| = 6 -> 0,  7 -> −0.25,  9 -> −0.75,  10 -> −1"""
    expected = max_len - buffer_len
    return (-(lengths.float() - expected) / buffer_len * penalty_factor).clamp(max=0.0)


@dataclass(frozen=True)
class OverlongBuffer:
    """The settings of `soft_overlong_punishment` (verl's reward_model.overlong_buffer: len,
    penalty_factor; its max_response_length is the run's gen_len)."""

    len: int
    penalty_factor: float
    max_len: int

    @classmethod
    def of(cls, args) -> OverlongBuffer | None:
        """The run's (`CommonArgs`: --overlong-buffer, --overlong-buffer-len, --overlong-buffer-penalty-factor,
        --gen-len), or None when it is off."""
        if not args.overlong_buffer:
            return None
        return cls(args.overlong_buffer_len, args.overlong_buffer_penalty_factor, args.gen_len)

    def punishment(self, lengths: Int[Tensor, " batch"]) -> Float[Tensor, " batch"]:
        return soft_overlong_punishment(lengths, self.max_len, self.len, self.penalty_factor)


@torch.no_grad()
def make_rollout(
    policy: Policy,
    ref_model: HookedTransformer | None,
    prompts: list[str],
    reward_fn,
    *,
    num_generations: int = 1,
    gen_len: int,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    prepend_bos: bool = True,
    stop_at_eos: bool = False,
    missing_eos_penalty: float | None = None,
    chunk_size: int = 16,
    keep_ref_hidden: bool = False,
    policy_precision: Callable[[], AbstractContextManager] = nullcontext,
    chunk_logits: int = LOGITS_PER_CHUNK,
    kv_cache: str = "auto",
    cuda_graph: bool = True,
    decoders: DecoderCache | None = None,
) -> Rollout:
    """Sample `num_generations` completions of each prompt, score and reward them: the three roles
    in order, `generate_sequences` → `compute_log_prob` → `compute_scores` (the trainer's role
    methods call them one at a time, and so does the controller's driver, remotely).

    `policy` is the HookedTransformer being tuned, or a `models.policy.PolicyWithExtras` (then the
    rollout also keeps its extras' output, PPO's V(s_t)). `reward_fn` follows either contract of `rollout.reward_call.score_completions`.
    `ref_model=None` skips the reference forward: the rollout's ref_logprobs and kl are None.
    Log-probs are at `temperature` (see `score_tokens`), over the whole softmax whatever `top_k` and
    `top_p` restricted the draw to (as TRL); `policy_precision` is the learning phase's
    autocast (`accel.learning_autocast`), so old and new log-probs are computed in one precision.
    `kv_cache` and `cuda_graph` choose how `generation.generate` samples (the static cache, CUDA-graphed
    on a GPU, where the model allows; `decoders` keeps the static decoder between rollouts).

    An instruct model is prompted as its users prompt it (`generation.tokenize_prompts`: through
    its chat template, unless the run removed it with --chat-template none) and stops at its
    generation config's EOS; `reward_fn` still receives the plain prompts and the completions' own
    text (`decode_completions`: the generated tokens only, without the EOS that ended them).
    """
    rollout = generate_sequences(
        language_model(policy), prompts, num_generations=num_generations, gen_len=gen_len, temperature=temperature,
        top_k=top_k, top_p=top_p, prepend_bos=prepend_bos, stop_at_eos=stop_at_eos, kv_cache=kv_cache,
        cuda_graph=cuda_graph, decoders=decoders,
    )
    compute_log_prob(policy, ref_model, rollout, chunk_size=chunk_size, keep_ref_hidden=keep_ref_hidden,
                     policy_precision=policy_precision, chunk_logits=chunk_logits)
    return compute_scores(rollout, reward_fn, missing_eos_penalty)


def policy_token_log_probs(
    policy: torch.nn.Module, rollout: Rollout, rows: Int[Tensor, " rows"], *, chunk_logits: int
) -> Float[Tensor, "rows gen_len"]:
    """log π(o_t | q, o_<t) of every completion token of the rollout's `rows` under `policy` now, with
    gradient: one forward pass to ĥ, then the generated span's log-probs at the rollout's sampling
    temperature, `chunk_logits` logits at a time (`token_terms`; padding positions are there, masked
    by every user; GRPO's per-token ratio is built on it). `policy` may be the trainer's `learner`
    (compiled and/or DDP-wrapped): the forward goes through it, the unembedding is the model's own.
    Call it inside the same `learning_autocast` the rollout scored under, so the first pass's ratio is exactly 1."""
    return policy_token_terms(policy, rollout, rows, chunk_logits=chunk_logits).logprobs


def policy_token_terms(
    policy: torch.nn.Module, rollout: Rollout, rows: Int[Tensor, " rows"], *, chunk_logits: int,
    with_entropy: bool = False,
) -> TokenTerms:
    """`policy_token_log_probs`, and with `with_entropy` also the entropy H[π] at each of those
    positions (at the same temperature, with gradient: GRPO's entropy bonus), from the same forward."""
    ids, mask = rollout.sample_ids[rows], rollout.attention_mask[rows]
    lm = unwrapped(policy)
    hidden = learner_hidden(policy, ids, attention_mask_or_none(mask, of=rollout.attention_mask))[:, generated_span(rollout.prefix_len)]
    targets = ids[:, rollout.prefix_len :]
    terms = token_terms(hidden.flatten(0, 1), unembedding(lm), targets.flatten(), rollout.temperature,
                        with_entropy=with_entropy, chunk_logits=chunk_logits)
    return terms.reshape(*targets.shape)


def learner_hidden(
    policy: torch.nn.Module, ids: Int[Tensor, "batch seq"], attention_mask: Int[Tensor, "batch seq"] | None
) -> Float[Tensor, "batch seq d_model"]:
    """ĥ of `ids` with gradient: a HookedTransformer through `final_hidden`, a trainer's learner (a
    `fast_forward.HiddenForward`, maybe compiled and/or DDP-wrapped) through its own forward, so
    that DDP sees the call and torch.compile compiles it."""
    if isinstance(policy, HookedTransformer):
        return final_hidden(policy, ids, attention_mask)
    return policy(ids, attention_mask)


def unwrapped(module: torch.nn.Module) -> HookedTransformer:
    """The model inside a trainer's `learner`: through torch.compile (`_orig_mod`), DDP (`module`)
    and the training forward (`HiddenForward.lm`)."""
    while True:
        inner = getattr(module, "_orig_mod", None)
        inner = getattr(module, "module", None) if inner is None else inner
        inner = getattr(module, "lm", None) if inner is None and isinstance(module, HiddenForward) else inner
        if not isinstance(inner, torch.nn.Module):
            return module
        module = inner


def policy_sequence_log_probs(
    policy: torch.nn.Module, rollout: Rollout, rows: Int[Tensor, " rows"], *, chunk_logits: int
) -> Float[Tensor, " rows"]:
    """log π(o | q) of the rollout's completions in `rows` under `policy` now, with gradient: the
    per-token log-probs of `policy_token_log_probs` summed over kept tokens (RLOO's ratio and DPO's
    loss are built on it). The same `learning_autocast` rule applies."""
    logprobs = policy_token_log_probs(policy, rollout, rows, chunk_logits=chunk_logits)
    return sequence_log_probs(logprobs, rollout.completion_mask[rows])
