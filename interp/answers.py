"""What RL changed on problems with one right answer (a task with its own problems, such as `arithmetic`),
read token by token with the answer given (teacher forcing): exact numbers, no sampling.

A problem is a prompt (`47+85=`) and its ground truth (`132`). Both models read the same sequence, BOS,
prompt, answer, EOS (`answer_batch`). The *answer positions* are those whose next token is an answer token
or the EOS after it: `=` predicts the first digit, the last digit predicts EOS. There:

- P(answer) = Π_k p(y_k | before) is exactly the chance that one sample at temperature 1 (no top-k, top-p) is
  the answer then EOS: the rule reward's expected pass@1 (`answer_logprob`). Greedy decoding is right iff the
  right token is the top token at every answer position (`greedy_right`).
- The logit lens (`answer_lens`): each site's residual through the model's *own* ln_final and unembedding
  (`interp.residual.logit_lens_logprobs`); at the final site it is the model's own log-probs. A token's
  *first top site* is the first site from which the right token stays the top token to the output.
- Operand reading (`operand_attention`): each head's attention from the positions that write a digit to the
  operands' digits, and to the two digits of the column being written (for `47+85=132`, writing "3", the
  tens: 4 and 8).
- Neurons (`answer_neuron_dla`): each MLP neuron's direct contribution to the right token's logit minus
  the mean logit, at the answer positions.

One token per character (the arithmetic model's tokenizer): a digit's position is its character's.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor
from transformer_lens import ActivationCache, HookedTransformer

from interp.families import centre_like_final_norm, require_additive_blocks
from interp.residual import logit_lens_logprobs

PROBLEM = re.compile(r"(\d+)([+\-*])(\d+)=")
"""An arithmetic prompt: operand, operation, operand, `=` (`rlhf_scratch.reward.arithmetic.Problem.prompt`)."""


@dataclass
class AnswerBatch:
    """The problems as both models read them (module docstring). `query[b, p]`: p is an answer position;
    `slot[b, p]`: what it writes, the digit's column (0 the units, 1 the tens, ...) or `n_columns` for the
    EOS (-1 elsewhere), so that a slot means one thing across answers of different lengths."""

    tokens: Int[Tensor, "batch pos"]  # BOS prompt answer EOS, right-padded with EOS
    query: Bool[Tensor, "batch pos"]
    targets: Int[Tensor, "batch pos"]  # the right next token at answer positions (0 elsewhere)
    slot: Int[Tensor, "batch pos"]
    operand: Bool[Tensor, "batch pos"]  # the operands' digit positions
    column: Bool[Tensor, "batch qpos kpos"]  # for a position writing a digit: the operand digits of its column
    digit: Bool[Tensor, "batch pos"]  # answer positions that write a digit (the EOS position left out)
    last: Int[Tensor, " batch"]  # each row's EOS position
    groups: dict[str, Bool[Tensor, " batch"]] = field(default_factory=dict)  # "op=+", "carry=yes", ...

    @property
    def slot_names(self) -> list[str]:
        """units, tens, hundreds, 10^3, ..., then EOS: what each slot writes."""
        n = int(self.slot.max())
        return [PLACES[c] if c < len(PLACES) else f"10^{c}" for c in range(n)] + ["EOS"]


PLACES = ("units", "tens", "hundreds")


def _columns(text: str, start: int) -> dict[int, list[int]]:
    """column (0 = units) -> the positions of a number's digits, the number's first digit at `start`."""
    return {len(text) - 1 - i: [start + i] for i in range(len(text))}


def answer_batch(model: HookedTransformer, prompts: Sequence[str], truths: Sequence[str],
                 columns: Sequence[dict] | None = None) -> AnswerBatch:
    """Each prompt followed by its ground truth and EOS, BOS first (module docstring); `columns`, each row's
    other columns, name the groups (`extra_info`'s op and carry). A ValueError names a prompt that is not
    `a OP b=` or a tokenizer that does not give one token per character."""
    eos = model.tokenizer.eos_token_id
    rows, spans = [], []
    for prompt, truth in zip(prompts, truths, strict=True):
        match = PROBLEM.fullmatch(prompt)
        if match is None:
            raise ValueError(f"answer analyses: the prompt {prompt!r} is not an arithmetic problem 'a OP b='")
        ids = model.to_tokens(prompt + truth, prepend_bos=True)[0].tolist()
        if len(ids) != 1 + len(prompt) + len(truth):
            raise ValueError(f"answer analyses read one token per character; {prompt + truth!r} is {len(ids) - 1} tokens")
        rows.append(ids + [eos])
        spans.append((match, len(prompt), len(truth)))
    width = max(len(r) for r in rows)
    n = len(rows)
    tokens = torch.full((n, width), eos, dtype=torch.long)
    query = torch.zeros(n, width, dtype=torch.bool)
    targets = torch.zeros(n, width, dtype=torch.long)
    slot = torch.full((n, width), -1, dtype=torch.long)
    operand = torch.zeros(n, width, dtype=torch.bool)
    column = torch.zeros(n, width, width, dtype=torch.bool)
    digit = torch.zeros(n, width, dtype=torch.bool)
    for b, (ids, (match, n_prompt, n_answer)) in enumerate(zip(rows, spans)):
        tokens[b, : len(ids)] = torch.tensor(ids)
        first = n_prompt  # position of `=` (BOS at 0): it predicts the first answer token
        for k in range(n_answer + 1):
            query[b, first + k], targets[b, first + k], slot[b, first + k] = True, ids[first + k + 1], n_answer - 1 - k
        a_cols = _columns(match.group(1), 1)
        b_cols = _columns(match.group(3), 1 + match.end(2))
        operand[b, [p for ps in (*a_cols.values(), *b_cols.values()) for p in ps]] = True
        for k in range(n_answer):  # writing answer digit k: its column is n_answer - 1 - k
            digit[b, first + k] = True  # a column past both operands (99+99=198's "1") has no operand digit
            column[b, first + k, a_cols.get(n_answer - 1 - k, []) + b_cols.get(n_answer - 1 - k, [])] = True
    n_columns = max(n_answer for _, _, n_answer in spans)
    slot[query & ~digit] = n_columns  # the EOS positions
    last = torch.tensor([len(r) - 1 for r in rows])
    return AnswerBatch(tokens, query, targets, slot, operand, column, digit, last, _groups(columns, n))


def _groups(columns: Sequence[dict] | None, n: int) -> dict[str, Bool[Tensor, " batch"]]:
    """"op=+", "carry=yes", ... from each row's `extra_info` (rows without one: no groups)."""
    infos = [(c or {}).get("extra_info") or {} for c in (columns or [None] * n)]
    groups: dict[str, Bool[Tensor, " batch"]] = {}
    for key in ("op", "carry", "digits"):
        values = [info.get(key) for info in infos]
        if any(v is None for v in values):
            continue
        for value in sorted({str(v) for v in values}):
            name = f"{key}={'yes' if value == 'True' else 'no' if value == 'False' else value}"
            groups[name] = torch.tensor([str(v) == value for v in values])
    return groups


def target_logprobs(logprobs: Float[Tensor, "*site batch pos d_vocab"], batch: AnswerBatch
                    ) -> Float[Tensor, "*site batch pos"]:
    """log p(right next token) at every position (0 where it is no answer position)."""
    picked = logprobs.gather(-1, batch.targets.expand(*logprobs.shape[:-1])[..., None])[..., 0]
    return picked * batch.query


def answer_logprob(logits: Float[Tensor, "batch pos d_vocab"], batch: AnswerBatch) -> Float[Tensor, " batch"]:
    """log P(answer then EOS | prompt) per problem: exp of it is one temperature-1 sample's chance to be right."""
    return target_logprobs(logits.log_softmax(-1), batch).sum(-1)


def greedy_right(logits: Float[Tensor, "batch pos d_vocab"], batch: AnswerBatch) -> Bool[Tensor, " batch"]:
    """Whether greedy decoding writes the answer then EOS: the right token on top at every answer position."""
    top = logits.argmax(-1) == batch.targets
    return (top | ~batch.query).all(-1)


def mean_answer_logprob(batch: AnswerBatch):
    """The metric patching and ablation read: mean over problems of log P(answer then EOS) (nats)."""
    return lambda logits: answer_logprob(logits, batch).mean()


@dataclass
class AnswerLens:
    """The logit lens at the answer positions (module docstring), per site and slot (`AnswerBatch.slot`)."""

    sites: list[str]
    slots: list[str]  # units, tens, ..., EOS
    top1: Float[Tensor, "site slot"]  # share of the slot's positions where the right token is the top token
    logprob: Float[Tensor, "site slot"]  # mean log p(right token) at the site (nats)
    count: Int[Tensor, " slot"]  # problems with the slot
    first_top: Int[Tensor, "site_or_never slot"]  # positions whose right token is first top for good at each site; last row: never
    final_logprobs: Float[Tensor, "batch pos"]  # the last site's log p(right token): the model's own (a check)


@torch.no_grad()
def answer_lens(cache: ActivationCache, batch: AnswerBatch) -> AnswerLens:
    """The logit lens on the answer's tokens, through the cache's own model (module docstring)."""
    logprobs, sites = logit_lens_logprobs(cache)  # site batch pos d_vocab
    right = target_logprobs(logprobs, batch)
    top = (logprobs.argmax(-1) == batch.targets) & batch.query  # site batch pos
    n_sites, slots = len(sites), batch.slot_names
    onehot = torch.stack([(batch.slot == k) for k in range(len(slots))], -1).float()  # batch pos slot
    count = onehot.sum((0, 1))
    top1 = torch.einsum("sbp,bpk->sk", top.float(), onehot) / count
    logprob = torch.einsum("sbp,bpk->sk", right, onehot) / count
    stays = top.flip(0).cummin(0).values.flip(0)  # stays[s]: top at every site from s to the output
    first = torch.where(stays.any(0), stays.float().argmax(0), torch.full_like(batch.slot, n_sites))  # batch pos
    first_top = torch.stack([torch.einsum("bp,bpk->k", (first == s).float(), onehot) for s in range(n_sites + 1)])
    return AnswerLens(sites, slots, top1, logprob, count.long(), first_top.long(), right[-1])


@torch.no_grad()
def operand_attention(cache: ActivationCache, batch: AnswerBatch
                      ) -> tuple[Float[Tensor, "n_layers n_heads"], Float[Tensor, "n_layers n_heads"]]:
    """Each head's attention from the positions that write a digit: (the share on the operands' digits, the
    share on the two digits of the column being written), mean over those positions of every problem."""
    model = cache.model
    queries = batch.digit.float()  # batch pos
    n = queries.sum()
    operand_share, column_share = [], []
    for layer in range(model.cfg.n_layers):
        pattern = cache["pattern", layer]  # batch head qpos kpos
        on_operand = (pattern * batch.operand[:, None, None, :]).sum(-1)  # batch head qpos
        on_column = (pattern * batch.column[:, None]).sum(-1)
        operand_share.append(torch.einsum("bhq,bq->h", on_operand, queries) / n)
        column_share.append(torch.einsum("bhq,bq->h", on_column, queries) / n)
    return torch.stack(operand_share), torch.stack(column_share)


@torch.no_grad()
def answer_neuron_dla(cache: ActivationCache, batch: AnswerBatch) -> Float[Tensor, "n_layers d_mlp"]:
    """Each neuron's direct contribution to the right token's logit minus the mean logit (nats), mean over
    the answer positions of every problem:

        DLA_{l,n} = mean_{b,p}  post_{l,n}[b,p] · c(W_out[l][n]) · (W_U[:, y_{b,p}] − mean_v W_U[:, v]) / scale[b,p]

    c as in `interp.neurons.neuron_dla` (centred under a final LayerNorm), scale the cached final-norm scale."""
    model = cache.model
    require_additive_blocks(model, "per-neuron DLA")
    W_U = model.W_U  # d_model d_vocab
    direction = (W_U - W_U.mean(-1, keepdim=True)).T[batch.targets]  # batch pos d_model
    scale = cache["ln_final.hook_scale"][..., 0]  # batch pos
    weight = batch.query.float() / scale
    rows = []
    for layer in range(model.cfg.n_layers):
        per_neuron = direction @ centre_like_final_norm(model, model.blocks[layer].mlp.W_out).T  # batch pos d_mlp
        post = cache[f"blocks.{layer}.mlp.hook_post"]
        rows.append(torch.einsum("bpn,bp->n", post * per_neuron, weight) / batch.query.sum())
    return torch.stack(rows)


@torch.no_grad()
def answer_activation_change(ref_cache: ActivationCache, tuned_cache: ActivationCache, batch: AnswerBatch
                             ) -> Float[Tensor, "n_layers d_mlp"]:
    """mean over the answer positions of post_tuned − post_ref, per neuron (the same tokens through both)."""
    weight = batch.query.float()
    return torch.stack([
        torch.einsum("bpn,bp->n", tuned_cache[f"blocks.{layer}.mlp.hook_post"] - ref_cache[f"blocks.{layer}.mlp.hook_post"],
                     weight) / weight.sum()
        for layer in range(ref_cache.model.cfg.n_layers)])
