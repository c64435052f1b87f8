"""Multi-turn episodes, token in and token out (issue 58): an episode is a list of segments, the model's
tokens exactly as sampled and the environment's tokens, assembled into the one `Rollout` every algorithm
already reads.

    prompt | model turn 1 ........ | observation | model turn 2 ......... | pad ...
           | <calc>47*85</calc>     | 3995        | 3995<|endoftext|>      |
    mask   | T  T  T  T  T  T  T    | F  F  F  F  | T  T  T  T  T          | F ...

`completion_ids` are the segments one after another (right-padded to --gen-len, the budget of the
whole episode, model and environment tokens together, as verl's response_length); `completion_mask` is
True on the model's tokens only. Every term of every algorithm reads that mask (the log-probs summed,
the KL and entropy averaged, the loss and its length normalisation, PPO's GAE: core/advantages.py), so
the environment's tokens are context the model reads, never actions it is trained on.

Generation, one turn at a time (`generate_episodes`): each unfinished row's context — its prompt ids
and its segments' ids, never text — is left-padded and sampled with the one sampler
(`generation.generate`, one call for the rows with the same budget left, so that no row is run past
its own) until EOS or the environment's stop token (`EnvironmentFactory.stop_ids`);
the turn goes to the environment, its observation is appended, and the next turn continues from the
ids. Left padding gives each token the position it has in the scoring forward of prompt + completion
(`generation`'s docstring), so log π_old is of the context the token was sampled in.

An episode ends at the model's EOS (then it is terminated, `Rollout.is_terminated`), when the
environment says done, after --max-turns model turns, or when the budget is spent (an observation
that does not fit is cut there). The reward function reads the model's last turn (`Rollout.completions`:
its text without EOS, the answer after the tool's reply); with no call at all that is the single-turn
completion, and the rollout equals `phase.generate_sequences`' token for token (tested).

Each episode's record rides in the rollout as one number per row (`episode_columns`: the environment's
reward, which `phase.compute_scores` takes as the score where it gives one; the model's turns; the tool
calls and errors of an environment that counts them; the environment's tokens), so it travels wherever
the rollout does (the controller's workers, DAPO's kept groups, torchrun's gather), and the loop logs
`episode_metrics` of it every phase.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import torch
from jaxtyping import Bool, Int
from torch import Tensor
from transformer_lens import HookedTransformer

from rlhf_scratch.core.timing import timed
from rlhf_scratch.models.static_cache import DecoderCache
from rlhf_scratch.rollout.environment import EnvironmentFactory, tool_counts
from rlhf_scratch.rollout.generation import eos_token_ids, generate, pad_token_id, tokenize_prompts
from rlhf_scratch.rollout.phase import Rollout


@dataclass(frozen=True)
class Segment:
    """A run of tokens of one author: the model's turn (exactly as sampled) or the environment's observation."""

    ids: tuple[int, ...]
    by_model: bool


@dataclass
class Episode:
    """One completion's segments and how it ended."""

    segments: list[Segment] = field(default_factory=list)
    turns: int = 0
    """Model turns taken."""
    done: bool = False
    reward: float | None = None
    """The environment's reward, when it owns one (`Step.reward`; the last one given)."""
    tool_counts: tuple[int, int] | None = None
    """(calls, errors) of the episode's tool calls, from an environment that counts them
    (`environment.CountsToolCalls`), else None."""

    def add(self, ids: tuple[int, ...], by_model: bool) -> None:
        if ids:
            self.segments.append(Segment(tuple(int(i) for i in ids), by_model))

    @property
    def ids(self) -> tuple[int, ...]:
        return tuple(i for s in self.segments for i in s.ids)

    @property
    def mask(self) -> tuple[bool, ...]:
        """True on the model's tokens, False on the environment's: what is trained."""
        return tuple(s.by_model for s in self.segments for _ in s.ids)

    @property
    def last_turn(self) -> tuple[int, ...]:
        """The model's last turn (its answer), () when it has not spoken."""
        return next((s.ids for s in reversed(self.segments) if s.by_model), ())

    @property
    def model_tokens(self) -> int:
        return sum(self.mask)

    @property
    def env_tokens(self) -> int:
        return len(self.mask) - self.model_tokens


def assemble_completions(
    episodes: list[Episode], gen_len: int, pad: int
) -> tuple[Int[Tensor, "batch gen_len"], Bool[Tensor, "batch gen_len"]]:
    """The episodes as a rollout's (completion_ids, completion_mask): each episode's segments one after
    another, right-padded with `pad` to `gen_len`; the mask True on the model's tokens only.

        segments  model (5, 6) · env (7) · model (8, 0)        gen_len 6, pad 0
        ids       [5, 6, 7, 8, 0, 0]
        mask      [T, T, F, T, T, F]

    An episode longer than `gen_len` is an error (`generate_episodes` keeps each within its budget)."""
    ids = torch.full((len(episodes), gen_len), pad, dtype=torch.long)
    mask = torch.zeros((len(episodes), gen_len), dtype=torch.bool)
    for row, episode in enumerate(episodes):
        tokens = episode.ids
        if len(tokens) > gen_len:
            raise ValueError(f"assemble_completions: episode {row} has {len(tokens)} tokens, more than gen_len {gen_len}")
        ids[row, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
        mask[row, : len(tokens)] = torch.tensor(episode.mask, dtype=torch.bool)
    return ids, mask


def left_padded(rows: list[list[int]], pad: int, device) -> tuple[Int[Tensor, "batch n"], Bool[Tensor, "batch n"]]:
    """Rows of ids, left-padded to the longest with `pad` (the mask False there), as `tokenize_prompts` pads."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long, device=device)
    mask = torch.zeros((len(rows), width), dtype=torch.bool, device=device)
    for i, row in enumerate(rows):
        ids[i, width - len(row):] = torch.tensor(row, dtype=torch.long, device=device)
        mask[i, width - len(row):] = True
    return ids, mask


@torch.no_grad()
def generate_episodes(
    lm: HookedTransformer,
    prompts: list[str],
    make_env: EnvironmentFactory,
    *,
    num_generations: int = 1,
    gen_len: int,
    max_turns: int,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    prepend_bos: bool = True,
    kv_cache: str = "auto",
    cuda_graph: bool = True,
    decoders: DecoderCache | None = None,
) -> tuple[Rollout, list[Episode]]:
    """`num_generations` episodes of each prompt (see the module docstring): a `Rollout` not yet scored
    (as `phase.generate_sequences` returns one) and each row's `Episode`, its segments and how it ended."""
    group_prompts = [p for p in prompts for _ in range(num_generations)]
    prompt_ids, prompt_mask = tokenize_prompts(lm, group_prompts, prepend_bos)
    eos, pad, device = eos_token_ids(lm), pad_token_id(lm), prompt_ids.device
    stops = eos + tuple(i for i in make_env.stop_ids if i not in eos)
    prompt_rows = [row[keep].tolist() for row, keep in zip(prompt_ids.cpu(), prompt_mask.cpu())]
    envs = [make_env(p) for p in group_prompts]
    episodes = [Episode() for _ in group_prompts]
    for env, episode in zip(envs, episodes):
        episode.add(tuple(env.reset())[:gen_len], by_model=False)
        episode.done = len(episode.ids) >= gen_len
        episode.tool_counts = tool_counts(env)
    with timed("generation"):
        while active := [i for i, e in enumerate(episodes) if not e.done]:
            by_budget: dict[int, list[int]] = {}  # one call per budget left: no row runs past its own (nor past n_ctx)
            for i in active:
                by_budget.setdefault(gen_len - len(episodes[i].ids), []).append(i)
            for budget, rows in by_budget.items():
                ids, mask = left_padded([prompt_rows[i] + list(episodes[i].ids) for i in rows], pad, device)
                turn_ids, turn_mask = generate(lm, ids, mask, budget, temperature, top_k, True, kv_cache=kv_cache,
                                               cuda_graph=cuda_graph, top_p=top_p, decoders=decoders, stop_ids=stops)
                for i, row, keep in zip(rows, turn_ids.cpu(), turn_mask.cpu()):
                    take_turn(episodes[i], envs[i], tuple(row[keep].tolist()), eos, gen_len, max_turns)
    completion_ids, completion_mask = assemble_completions(episodes, gen_len, pad)
    with timed("reward"):  # decoding is the reward's part of the clock, as in generate_sequences
        completions = [lm.tokenizer.decode([t for t in e.last_turn if t not in eos]) for e in episodes]
    completion_ids, completion_mask = completion_ids.to(device), completion_mask.to(device)
    rollout = Rollout(
        prompt_ids=prompt_ids, completion_ids=completion_ids, completion_mask=completion_mask,
        attention_mask=torch.cat([prompt_mask, torch.ones_like(completion_mask)], dim=1),
        prompts=group_prompts, completions=completions, num_generations=num_generations,
        eos_token_id=eos, temperature=temperature, **episode_columns(episodes, device),
    )
    return rollout, episodes


def episode_columns(episodes: list[Episode], device=None) -> dict[str, Tensor | None]:
    """Each episode's record as the rollout's columns, one number a row (`Rollout.env_rewards` …):

        env_rewards   the environment's reward (`Episode.reward`), NaN where it gave none
        num_turns     the model's turns
        tool_calls    calls and errors, where every episode's environment counts them (else None)
        tool_errors
        env_tokens    the environment's tokens"""
    counted = all(e.tool_counts is not None for e in episodes)

    def column(values, dtype=torch.long):
        return torch.tensor(values, dtype=dtype, device=device)

    return {
        "env_rewards": column([float("nan") if e.reward is None else e.reward for e in episodes], torch.float32),
        "num_turns": column([e.turns for e in episodes]),
        "tool_calls": column([e.tool_counts[0] for e in episodes]) if counted else None,
        "tool_errors": column([e.tool_counts[1] for e in episodes]) if counted else None,
        "env_tokens": column([e.env_tokens for e in episodes]),
    }


CALL_BUCKETS = (("0", 0, 0), ("1", 1, 1), ("2+", 2, None))
"""The episodes `tools/reward_by_calls/<name>` averages over: those with lo..hi calls (None: no upper bound)."""


def episode_metrics(rollout) -> dict[str, float]:
    """What a phase's episodes did (a `Rollout`, or the gathered `engine.batch.Gathered`: every process's
    rows); {} without an environment. verl's and TRL's names where they have one:

        episodes/model_turns/min|max|mean   the model's turns per episode (our name: verl's num_turns counts every
                                      message, the prompt's and the tool's too, so its name is not borrowed)
        tools/call_frequency          tool calls per episode (TRL's): Σ calls / episodes
        tools/failure_frequency       the calls answered with an error (TRL's): Σ errors / Σ calls, 0 without a call
        tools/reward_by_calls/0|1|2+  the mean reward of the episodes with 0, 1, 2 or more calls; NaN where none
        episodes/model_tokens         the model's tokens per episode (what is trained), mean
        episodes/env_tokens           the environment's tokens per episode (context, never trained), mean

    The tools/ numbers need an environment that counts its calls (`environment.CountsToolCalls`).

        turns [2, 1, 3], calls [1, 0, 2], errors [0, 0, 1], rewards [1, 0, 0.5]
        -> num_turns 1 | 3 | 2,  call_frequency 3/3 = 1,  failure_frequency 1/3,
           reward_by_calls 0: 0, 1: 1, 2+: 0.5"""
    if rollout.num_turns is None:
        return {}
    turns = rollout.num_turns.float()
    metrics = {
        "episodes/model_turns/min": turns.min().item(),
        "episodes/model_turns/max": turns.max().item(),
        "episodes/model_turns/mean": turns.mean().item(),
    }
    if rollout.tool_calls is not None:
        calls, errors = rollout.tool_calls, rollout.tool_errors
        total = int(calls.sum())
        metrics["tools/call_frequency"] = total / len(calls)
        metrics["tools/failure_frequency"] = int(errors.sum()) / total if total else 0.0
        for name, lo, hi in CALL_BUCKETS if rollout.rewards is not None else ():
            rows = (calls >= lo) & (calls <= hi) if hi is not None else calls >= lo
            metrics[f"tools/reward_by_calls/{name}"] = rollout.rewards[rows].mean().item() if rows.any() else float("nan")
    metrics["episodes/model_tokens"] = rollout.lengths.float().mean().item()
    metrics["episodes/env_tokens"] = rollout.env_tokens.float().mean().item()
    return metrics


RECORD = ("num_turns", "tool_calls", "tool_errors", "env_tokens")
"""The columns of an episode's record that a validation keeps of each sample (`dataflow.validate`)."""


def held_out_episode_metrics(record: dict[str, list[int]], lengths: list[int]) -> dict[str, float]:
    """`episode_metrics` of a validation's samples (their `RECORD` columns and lengths, every held-out sample),
    each under eval/: eval/episodes/model_turns/mean, eval/tools/call_frequency (the held-out call rate) … — all but the
    reward by calls, which a task's evaluation does not give per sample."""
    columns = {k: torch.tensor(record[k]) if k in record else None for k in RECORD}
    rows = SimpleNamespace(**columns, lengths=torch.tensor(lengths), rewards=None)
    return {f"eval/{k}": v for k, v in episode_metrics(rows).items()}


def take_turn(episode: Episode, env, turn: tuple[int, ...], eos: tuple[int, ...], gen_len: int, max_turns: int) -> None:
    """Record the model's `turn` (its ids as sampled, within the budget), hand it to the environment, and
    append the observation unless the episode is over: at EOS, when the environment says done, after
    `max_turns` turns, or when the budget is spent (an observation that does not fit is cut there)."""
    episode.add(turn, by_model=True)
    episode.turns += 1
    step = env.step(turn)
    episode.tool_counts = tool_counts(env)
    if step.reward is not None:
        episode.reward = float(step.reward)
    left = gen_len - len(episode.ids)
    episode.done = (not turn or turn[-1] in eos or step.done or episode.turns >= max_turns or left <= 0)
    if not episode.done:
        episode.add(tuple(step.observation)[:left], by_model=False)
        episode.done = len(episode.ids) >= gen_len
