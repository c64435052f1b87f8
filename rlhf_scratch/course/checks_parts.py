"""The checks of exercises 07, the parts ARENA's RLHF chapter has you build: the value head as a module on
the HookedTransformer, the generation loop, the replay memory. Built as `checks.py` is (read its docstring),
except that a part's answer on a random model is not worked out by hand: each case's expected answer is the
solution's (`course/solutions_parts.py`, tested equal to the package's in tests/integration/test_course_parts.py)
and each mistake's answer is that mistake planted in a copy of the solution (`_ValueHeadPlanted`,
`_generate_planted`, `_MemoryPlanted`), run on the same inputs: a random 2-layer model, milliseconds a case.

Longer than 500 lines because the three checks share that model, its prompts and the way a planted copy is
built and compared: one file read top to bottom, a section per part, as `checks.py`.
"""

import copy
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import torch
from torch import Tensor, nn
from transformer_lens import HookedTransformer, HookedTransformerConfig

from rlhf_scratch.course import solutions_parts
from rlhf_scratch.course.checks import Case, Mistake, Reference, _run
from rlhf_scratch.course.parts_kit import ReplayMinibatch, forward_at, new_cache

SOLUTIONS = "rlhf_scratch.course.solutions_parts"
REFERENCES: dict[str, Reference] = {  # each exercise's solution, written to be read
    "TransformerWithValueHead": Reference(SOLUTIONS, "(base, detach_value_head=True)", by_position=True),
    "generate": Reference(SOLUTIONS, "(model, prompts, gen_len, next_token, pad_id, eos_id=None, use_cache=False)"),
    "ReplayMemory": Reference(SOLUTIONS, "(sample_ids, attention_mask, completion_mask, logprobs, advantages, values, "
                                         "num_minibatches, batches_per_learning_phase)", by_position=True),
}

D_VOCAB, D_MODEL, PAD = 40, 16, 0


def random_model(seed: int = 0) -> HookedTransformer:
    """A random 2-layer LN GPT-2-like HookedTransformer, 40 tokens, d_model 16, n_ctx 32 (no tokenizer): a fresh
    copy each call, so that nothing a learner's code did to one reaches the next case."""
    return copy.deepcopy(_random_model(seed))


@lru_cache(maxsize=2)
def _random_model(seed: int) -> HookedTransformer:
    cfg = HookedTransformerConfig(n_layers=2, d_model=D_MODEL, n_heads=2, d_head=8, d_mlp=64, n_ctx=32,
                                  d_vocab=D_VOCAB, act_fn="gelu", normalization_type="LN", seed=seed)
    model = HookedTransformer(cfg)
    with torch.no_grad():  # positions that matter: W_pos as large as W_E
        model.W_pos.mul_(model.W_E.std() / model.W_pos.std())
    return model.eval()


def prompts() -> list[Tensor]:
    """Three prompts of 5, 2 and 3 tokens, BOS (= pad = 0) first, as GPT-2's."""
    return [torch.tensor([0, 5, 6, 7, 8]), torch.tensor([0, 9]), torch.tensor([0, 11, 12])]


def _left_padded() -> tuple[Tensor, Tensor]:
    return solutions_parts.generate(random_model(), prompts(), 0, _greedy, PAD)[:2]


def _greedy(logits: Tensor) -> Tensor:  # the check's next_token: deterministic
    return logits.argmax(-1)


# --- TransformerWithValueHead -------------------------------------------------------------------

WRONG_HOOK = ("the value head read the residual BEFORE the final LayerNorm (blocks.{n-1}.hook_resid_post): read "
              "ln_final.hook_normalized, the normalised vector the unembedding reads")
MASK_DROPPED = ("the attention mask was not passed on: base.run_with_hooks(input_ids, attention_mask=attention_mask, "
                "...); without it a left-padded row attends to its pads and its positions are not shifted")
NOT_DETACHED = ("with detach_value_head=True the head must read resid.detach(): the value loss then trains the head "
                "only, not the trunk (the blog's final code)")
ALWAYS_DETACHED = ("with detach_value_head=False the value loss trains the trunk too (ARENA's choice): detach only "
                   "when detach_value_head is True")
NO_GRAD_VALUES = ("the values carry no gradient at all (torch.no_grad() or .detach() on the head's output): the value "
                  "loss could not train the head")
HOOK_LEFT = ("a hook stayed on the base model after forward (add_hook, never removed): it runs the head on every "
             "later forward of the LM, the sampler's too, and one added per forward piles up; use "
             "base.run_with_hooks(..., fwd_hooks=[(name, fn)]), which removes it when the call returns")
GRAPH_KEPT = ("the values stayed on the module after forward (self.values): they hold the graph of the whole forward "
              "until the next call; hand them over and set the attribute back to None")
HEAD_SHAPE = ("the value head must be self.value_head = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.ReLU(), "
              "nn.Linear(4 * d_model, 1)), the blog's (the check loads its weights into it)")
ON_LOGITS = ("the value head was applied to the final logits (d_vocab wide), not the residual: hook "
             "ln_final.hook_normalized, [batch, seq, d_model]")
NOT_SQUEEZED = "the values are [batch, seq, 1]: squeeze the head's last dimension, V(s_t) is one number a position"


class _ValueHeadPlanted(solutions_parts.TransformerWithValueHead):
    """The solution with one mistake planted: `mistake` names it."""

    def __init__(self, base: HookedTransformer, detach_value_head: bool = True, mistake: str = ""):
        super().__init__(base, detach_value_head)
        self.mistake = mistake

    def store_values(self, resid: Tensor, hook: Any) -> None:
        detach = {"not_detached": False, "always_detached": True}.get(self.mistake, self.detach_value_head)
        self.values = self.value_head(resid.detach() if detach else resid).squeeze(-1)
        if self.mistake == "no_grad_values":
            self.values = self.values.detach()

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        hook = f"blocks.{self.base.cfg.n_layers - 1}.hook_resid_post" if self.mistake == "wrong_hook" \
            else "ln_final.hook_normalized"
        mask = None if self.mistake == "mask_dropped" else attention_mask
        if self.mistake == "hook_left":
            self.base.add_hook(hook, self.store_values)
            logits = self.base(input_ids, attention_mask=mask)
        else:
            logits = self.base.run_with_hooks(input_ids, attention_mask=mask, fwd_hooks=[(hook, self.store_values)])
        if self.mistake == "graph_kept":
            return logits, self.values
        values, self.values = self.values, None
        return logits, values


def _head_state() -> dict[str, Tensor]:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(D_MODEL, 4 * D_MODEL), nn.ReLU(), nn.Linear(4 * D_MODEL, 1)).state_dict()


def _value_module(fn: Callable, detach: bool) -> tuple[HookedTransformer, nn.Module]:
    base = random_model()
    module = fn(base, detach)
    head = getattr(module, "value_head", None)
    try:
        ok = isinstance(head, nn.Module) and head.load_state_dict(_head_state()) is not None
    except RuntimeError:
        ok = False
    if not ok:
        raise AssertionError(f"check_TransformerWithValueHead: {HEAD_SHAPE}")
    return base, module


def _forward(module: nn.Module, ids: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """module(ids, attention_mask=mask), the head-on-the-logits mistake named (it cannot multiply)."""
    try:
        logits, values = module(ids, attention_mask=mask.long())
    except RuntimeError as e:
        if f"x{D_VOCAB} and {D_MODEL}x" not in str(e):
            raise
        on_logits = True
    else:
        on_logits = False
    if on_logits:
        raise AssertionError(f"check_TransformerWithValueHead: {ON_LOGITS}")
    if isinstance(values, Tensor) and values.dim() == 3 and values.shape[-1] == 1:
        raise AssertionError(f"check_TransformerWithValueHead: {NOT_SQUEEZED}")
    return logits, values


def _values_on_real_tokens(fn: Callable) -> Any:
    ids, mask = _left_padded()
    _, values = _forward(_value_module(fn, True)[1], ids, mask)
    return values[mask] if isinstance(values, Tensor) and values.shape == mask.shape else values


def _gradient_norms(detach: bool) -> Callable[[Callable], Tensor]:
    def run(fn: Callable) -> Tensor:
        ids, mask = _left_padded()
        base, module = _value_module(fn, detach)
        _, values = _forward(module, ids, mask)
        if values.requires_grad:
            values[mask].sum().backward()
        return torch.tensor([_grad_norm(base.parameters()), _grad_norm(module.value_head.parameters())])
    return run


def _grad_norm(params: Any) -> float:
    grads = [p.grad.norm() for p in params if p.grad is not None]
    return float(torch.stack(grads).norm()) if grads else 0.0


def _left_behind(fn: Callable) -> Tensor:
    ids, mask = _left_padded()
    base, module = _value_module(fn, True)
    for _ in range(2):
        _forward(module, ids, mask)
    hooks = sum(len(h.fwd_hooks) for h in base.hook_dict.values())
    graphs = sum(1 for v in vars(module).values() if isinstance(v, Tensor) and v.grad_fn is not None)
    return torch.tensor([hooks, graphs])


def _planted_head(mistake: str) -> Callable:
    return lambda base, detach=True: _ValueHeadPlanted(base, detach, mistake)


@lru_cache(maxsize=1)  # the planted mistakes run once a process: the cases are pure
def _value_head_cases() -> list[Case]:
    def case(name: str, run: Callable, mistakes: dict[str, str], **tol: float) -> Case:
        return Case(name, run, run(solutions_parts.TransformerWithValueHead),
                    tuple(Mistake(run(_planted_head(m)), hint) for m, hint in mistakes.items()), **tol)

    return [
        case("V(s_t) at the real tokens of a left-padded batch", _values_on_real_tokens,
             {"wrong_hook": WRONG_HOOK, "mask_dropped": MASK_DROPPED}),
        case("detach_value_head=True: [trunk, head] gradient norms of sum V", _gradient_norms(True),
             {"not_detached": NOT_DETACHED, "no_grad_values": NO_GRAD_VALUES}),
        case("detach_value_head=False: [trunk, head] gradient norms of sum V", _gradient_norms(False),
             {"always_detached": ALWAYS_DETACHED, "no_grad_values": NO_GRAD_VALUES}),
        Case("after two forwards: [hooks left on the base, tensors with a graph left on the module]", _left_behind,
             [0, 0], (Mistake([2, 0], HOOK_LEFT, like=lambda out: bool(out.numel() == 2 and out[0] > 0)),
                      Mistake([0, 1], GRAPH_KEPT, like=lambda out: bool(out.numel() == 2 and out[1] > 0))),
             atol=0.0, rtol=0.0),
    ]


def check_TransformerWithValueHead(fn: Callable) -> None:  # noqa: N802 (named after the class it checks)
    """Check `TransformerWithValueHead(base, detach_value_head=True)`: forward(input_ids, attention_mask=None)
    -> (logits, values [batch, seq]) with V from an MLP on ln_final.hook_normalized, against the solution
    (`rlhf_scratch.course.solutions_parts`; the package's: `rlhf_scratch.algorithms.ppo.TransformerWithValueHead`).

    Recognises: the wrong hook (before the final LayerNorm), the head on the final logits, the attention
    mask not passed on, the values not squeezed, not detached where detach_value_head asks, detached where
    it does not, no gradient at all, a hook left on the base, the values (and their graph) kept on the module.
    """
    _run("TransformerWithValueHead", fn, _value_head_cases(), REFERENCES["TransformerWithValueHead"])


# --- generate -----------------------------------------------------------------------------------

RIGHT_PAD = ("the prompts were padded on the RIGHT: a short prompt's next token is then drawn after a pad; "
             "left-pad, so every prompt ends at the last column")
POSITIONS_UNSHIFTED = ("positions not shifted for left padding: a padded prompt must get the positions it has "
                       "alone, counted from its first real token (cumsum(mask) - 1, 0 on the pads)")
POSITIONS_FROM_ONE = "positions off by one: the first real token is position 0 (cumsum(mask) - 1, not cumsum(mask))"
PADS_ATTENDED = "the pads are attended: the attention mask must be False on the left padding (True on real tokens)"
CACHE_POSITION_REPEATED = ("KV cache position off by one: the new token repeats the position of the token before "
                           "it; it sits one past each row's last position (with the cache or without)")
CACHE_POSITION_PADDED = ("KV cache position counted from the padded width (prompt_len + t): a left-padded row's "
                         "next position is one past ITS last position, which is smaller by its pad count")
CACHE_REFED = ("with the KV cache, feed only the new token: the cache already holds every earlier column, and "
               "feeding the whole sequence again puts each one in it twice")
EOS_DROPPED = ("the EOS left out of the completion mask: it is the policy's last action (the reward arrives "
               "there), so the mask is True up to AND including the first EOS")
AFTER_EOS = ("a row that said EOS kept going: after its first EOS every token is pad_id and its completion mask False")


def _generate_planted(model: HookedTransformer, prompts: list[Tensor], gen_len: int, next_token: Callable,
                      pad_id: int, eos_id: int | None = None, use_cache: bool = False, mistake: str = "") -> tuple:
    """The solution's loop (solutions_parts.generate) with the mistake `mistake` planted."""
    batch, width = len(prompts), max(len(p) for p in prompts)
    ids = torch.full((batch, width), pad_id, dtype=torch.long)
    mask = torch.zeros((batch, width), dtype=torch.bool)
    for b, prompt in enumerate(prompts):
        cols = slice(0, len(prompt)) if mistake == "right_pad" else slice(width - len(prompt), width)
        ids[b, cols], mask[b, cols] = prompt, True
    positions = (mask.long().cumsum(-1) - (0 if mistake == "positions_from_one" else 1)).clamp(min=0)
    if mistake == "positions_unshifted":
        positions = torch.arange(width).expand(batch, width)
    if mistake == "pads_attended":
        mask = torch.ones_like(mask)
    cache = new_cache(model, batch) if use_cache else None
    new = (ids, positions, mask)
    completion_mask = torch.zeros((batch, gen_len), dtype=torch.bool)
    finished = torch.zeros(batch, dtype=torch.bool)
    for t in range(gen_len):
        logits = forward_at(model, *new, cache)[:, -1] if use_cache else forward_at(model, ids, positions, mask)[:, -1]
        token = next_token(logits) if mistake == "after_eos" else torch.where(finished, pad_id, next_token(logits))
        completion_mask[:, t] = ~finished
        if eos_id is not None and mistake != "after_eos":
            if mistake == "eos_dropped":
                completion_mask[:, t] &= token != eos_id
            finished |= token == eos_id
        step = {"cache_position_repeated": 0}.get(mistake, 1)
        next_position = torch.full((batch, 1), width + t) if mistake == "cache_position_padded" \
            else positions[:, -1:] + step
        ids = torch.cat([ids, token[:, None]], dim=1)
        positions = torch.cat([positions, next_position], dim=1)
        mask = torch.cat([mask, torch.ones((batch, 1), dtype=torch.bool)], dim=1)
        new = (ids, positions, mask) if mistake == "cache_refed" else (token[:, None], next_position, mask[:, -1:])
    return ids, mask, completion_mask


def _generated(fn: Callable, eos_id: int | None, use_cache: bool, gen_len: int = 6) -> Any:
    """fn's (ids, attention_mask, completion_mask) as one [batch, 2 * seq + gen_len] long tensor."""
    out = fn(random_model(), prompts(), gen_len, _greedy, PAD, eos_id=eos_id, use_cache=use_cache)
    if isinstance(out, tuple) and len(out) == 3 and all(isinstance(t, Tensor) for t in out) \
            and out[0].shape == out[1].shape and out[2].dim() == 2:
        return torch.cat([out[0].long(), out[1].long(), out[2].long()], dim=1)
    return out


@lru_cache(maxsize=1)
def _eos() -> int:
    """A token the greedy loop says at step 2 of row 0: with it as EOS the rows end after 2, 3 and 1 tokens."""
    ids, _, _ = solutions_parts.generate(random_model(), prompts(), 6, _greedy, PAD)
    return int(ids[0, 5 + 2])


@lru_cache(maxsize=1)  # the planted mistakes run once a process: the cases are pure
def _generate_cases() -> list[Case]:
    prompt_mistakes = {"right_pad": RIGHT_PAD, "positions_unshifted": POSITIONS_UNSHIFTED,
                       "positions_from_one": POSITIONS_FROM_ONE, "pads_attended": PADS_ATTENDED,
                       "cache_position_repeated": CACHE_POSITION_REPEATED,  # a new token's position: cache or not
                       "cache_position_padded": CACHE_POSITION_PADDED}
    cache_mistakes = {"cache_refed": CACHE_REFED}
    eos_mistakes = {"eos_dropped": EOS_DROPPED, "after_eos": AFTER_EOS}

    def case(name: str, eos: bool, use_cache: bool) -> Case:
        eos_id = _eos() if eos else None

        def run(fn: Callable) -> Any:
            return _generated(fn, eos_id, use_cache)

        # the cache's mistakes where they show (re-fed columns, counted twice, happen to change no greedy
        # token once the EOS rows have stopped: the case before names it)
        cache = cache_mistakes if use_cache and not eos else {}
        mistakes = {**prompt_mistakes, **cache, **(eos_mistakes if eos else {})}
        return Case(name, run, run(solutions_parts.generate),
                    tuple(Mistake(run(lambda *a, m=m, **k: _generate_planted(*a, **k, mistake=m)), hint)
                          for m, hint in mistakes.items()), atol=0.0, rtol=0.0)

    return [case("prompts of 5, 2 and 3 tokens, greedy, 6 tokens, no EOS", eos=False, use_cache=False),
            case("the same, with an EOS each row says at its own step", eos=True, use_cache=False),
            case("the same with the KV cache (use_cache=True)", eos=False, use_cache=True),
            case("the KV cache and the EOS", eos=True, use_cache=True)]


def _raises_not_implemented(fn: Callable, use_cache: bool) -> bool:
    try:
        fn(random_model(), prompts(), 2, _greedy, PAD, eos_id=None, use_cache=use_cache)
    except NotImplementedError:
        return True
    except Exception:  # noqa: BLE001 (the cases say what went wrong)
        return False
    return False


def _cache_written(fn: Callable) -> bool:
    """False where use_cache=True raises NotImplementedError and use_cache=False does not (the cache is optional)."""
    return not _raises_not_implemented(fn, True) or _raises_not_implemented(fn, False)


def check_generate(fn: Callable) -> None:
    """Check `generate(model, prompts, gen_len, next_token, pad_id, eos_id=None, use_cache=False) -> (ids,
    attention_mask, completion_mask)` on a random model, greedy, against the solution (`rlhf_scratch.course.
    solutions_parts`; the package's: `rlhf_scratch.rollout.generation.generate`, tokens equal). The KV cache is
    optional: when use_cache=True raises NotImplementedError, the cases without it are run and the line says so.

    Recognises: right padding, positions not shifted for left padding, positions from 1, the pads attended;
    the KV cache position repeated or counted from the padded width, the whole sequence fed to the cache
    again; the EOS left out of the mask, a row that said EOS going on.
    """
    cases = _generate_cases()
    if _cache_written(fn):
        _run("generate", fn, cases, REFERENCES["generate"])
        return
    _run("generate", fn, cases[:2], REFERENCES["generate"])
    print("  (the KV cache, optional, is not written: use_cache=True raised NotImplementedError; its 2 cases not run)")


# --- ReplayMemory -------------------------------------------------------------------------------

BATCH, SEQ, GEN, MINIBATCHES, EPOCHS = 6, 5, 3, 3, 2
FIELDS = ("sample_ids", "attention_mask", "completion_mask", "logprobs", "advantages", "returns")

SAME_ORDER = ("the same shuffle in every epoch: draw a NEW torch.randperm when each epoch begins, or every epoch "
              "repeats the same minibatches in the same order")
OVERLAPPING = ("the minibatches overlap: a permutation per minibatch uses some rows twice in an epoch and others "
               "never; draw one permutation per epoch and cut it into num_minibatches")
NOT_SHUFFLED = "the rows were not shuffled: draw torch.randperm(batch, generator=generator) for each epoch"
SIZE_FOR_COUNT = ("num_minibatches is how MANY minibatches (each of batch // num_minibatches rows), not their "
                  "size: order.view(num_minibatches, -1)")
ROWS_DROPPED = "rows dropped: the last minibatch of each epoch is missing; every row is used once per epoch"
GENERATOR_IGNORED = ("the generator was ignored: torch.randperm(batch, generator=generator), so a seeded generator "
                     "(and the learning-phase check) sees the same shuffles")
RETURNS_NEXT_STATE = ("returns off by one: V(s_t) is the value of the state token t was CHOSEN in, "
                      "values[:, -gen_len-1:-1], not values[:, -gen_len:] (the state after it)")
RETURNS_PROMPT = ("the returns read the prompt's values (values[:, :gen_len]): the generated tokens' states are the "
                  "LAST gen_len + 1 columns but one, values[:, -gen_len-1:-1]")
RETURNS_ADVANTAGES = "the returns are the advantages alone: R_t = A_t + V_old(s_t), the value target the head regresses on"
RETURNS_VALUES = "the returns are the old values alone: R_t = A_t + V_old(s_t), the advantage added"
FIELDS_MISALIGNED = ("the fields of a minibatch come from different rows: gather every field with the SAME row "
                     "indices")
GRAPH_IN_MEMORY = ("the memory keeps the gradient graph: a stored tensor (or a minibatch's) still requires grad, "
                   "which keeps the whole rollout's activations alive; detach what the memory stores")


def _rollout(with_graph: bool = False) -> tuple:
    """Inputs where every row says which row it is: sample_ids[b] = 10 b + column, logprobs = b + t / 10, ..."""
    b = torch.arange(BATCH, dtype=torch.float32)[:, None]
    leaf = torch.ones(1, requires_grad=with_graph)
    sample_ids = 10 * torch.arange(BATCH)[:, None] + torch.arange(SEQ)
    attention_mask = torch.arange(SEQ) >= torch.arange(BATCH)[:, None] % 2  # rows 1, 3, 5 padded once
    completion_mask = torch.arange(GEN) < 3 - torch.arange(BATCH)[:, None] % 3
    logprobs = (b + torch.arange(GEN) / 10) * leaf
    advantages = (100 + b + torch.arange(GEN) / 10) * leaf
    values = (1000 * b + 7 ** torch.arange(SEQ, dtype=torch.float32)) * leaf  # every column its own value
    return sample_ids, attention_mask, completion_mask, logprobs, advantages, values, MINIBATCHES, EPOCHS


class _MemoryPlanted(solutions_parts.ReplayMemory):
    """The solution with one mistake planted: `mistake` names it."""

    def __init__(self, *args: Any, mistake: str = ""):
        super().__init__(*args)
        self.mistake = mistake
        sample_ids, _, _, logprobs, advantages, values, *_ = args
        gen_len = logprobs.shape[1]
        returns = {"returns_next_state": advantages + values[:, -gen_len:],
                   "returns_prompt": advantages + values[:, :gen_len], "returns_advantages": advantages,
                   "returns_values": values[:, -gen_len - 1:-1]}
        if mistake in returns:
            self.returns = returns[mistake].detach()
        if mistake == "graph_kept":
            self.logprobs, self.advantages, self.returns = logprobs, advantages, advantages + values[:, -gen_len - 1:-1]

    def get_minibatches(self, generator: torch.Generator | None = None):
        batch, size = self.sample_ids.shape[0], self.sample_ids.shape[0] // self.num_minibatches
        order = torch.randperm(batch, generator=generator) if self.mistake == "same_order" else None
        for _ in range(self.batches_per_learning_phase):
            if self.mistake != "same_order":
                order = torch.arange(batch) if self.mistake == "not_shuffled" else \
                    torch.randperm(batch, generator=None if self.mistake == "generator_ignored" else generator)
            cuts = order.view(-1, self.num_minibatches) if self.mistake == "size_for_count" else \
                order.view(self.num_minibatches, -1)
            for i, rows in enumerate(cuts):
                if self.mistake == "rows_dropped" and i == len(cuts) - 1:
                    continue
                if self.mistake == "overlapping":
                    rows = torch.randperm(batch, generator=generator)[:size]
                other = rows.roll(1) if self.mistake == "fields_misaligned" else rows
                yield ReplayMinibatch(
                    sample_ids=self.sample_ids[rows], attention_mask=self.attention_mask[rows],
                    completion_mask=self.completion_mask[rows], logprobs=self.logprobs[other],
                    advantages=self.advantages[other], returns=self.returns[other])


def _minibatches(fn: Callable, seed: int, with_graph: bool = False) -> tuple[Any, list]:
    torch.manual_seed(1234)  # a generator ignored draws from here: the same rows every time
    memory = fn(*_rollout(with_graph))
    return memory, list(memory.get_minibatches(torch.Generator().manual_seed(seed)))


def _stacked(parts: list[Tensor]) -> Any:
    return torch.stack(parts) if parts and all(p.shape == parts[0].shape for p in parts) else parts


def _row_of(mb: Any) -> Tensor:  # sample_ids[b] = 10 b + column
    return torch.as_tensor(mb.sample_ids)[:, 0] // 10


def _rows(seed: int) -> Callable[[Callable], Any]:
    def run(fn: Callable) -> Any:
        return _stacked([_row_of(mb) for mb in _minibatches(fn, seed)[1]])
    return run


def _aligned(fn: Callable) -> Any:
    """[minibatch, field, row]: the row sample_ids, logprobs and advantages came from (the returns: the next case)."""
    out = []
    for mb in _minibatches(fn, 0)[1]:
        rows = [_row_of(mb), mb.logprobs[:, 0].floor().long(), (mb.advantages[:, 0] - 100).floor().long()]
        out.append(torch.stack(rows))
    return _stacked(out)


def _returns(fn: Callable) -> Any:
    return _stacked([torch.as_tensor(mb.returns).detach() for mb in _minibatches(fn, 0)[1]])


def _graphs(fn: Callable) -> Tensor:
    """[stored tensors that require grad, minibatch fields that require grad]."""
    memory, mbs = _minibatches(fn, 0, with_graph=True)
    stored = sum(1 for v in vars(memory).values() if isinstance(v, Tensor) and v.requires_grad)
    fields = sum(1 for mb in mbs for f in FIELDS if isinstance(getattr(mb, f, None), Tensor) and getattr(mb, f).requires_grad)
    return torch.tensor([stored, fields])


@lru_cache(maxsize=1)  # the planted mistakes run once a process: the cases are pure
def _memory_cases() -> list[Case]:
    def planted(mistake: str) -> Callable:
        return lambda *args: _MemoryPlanted(*args, mistake=mistake)

    def case(name: str, run: Callable, mistakes: dict[str, str], exact: bool = True) -> Case:
        tol = dict(atol=0.0, rtol=0.0) if exact else {}
        return Case(name, run, run(solutions_parts.ReplayMemory),
                    tuple(Mistake(run(planted(m)), hint) for m, hint in mistakes.items()), **tol)

    shuffles = {"same_order": SAME_ORDER, "overlapping": OVERLAPPING, "not_shuffled": NOT_SHUFFLED,
                "size_for_count": SIZE_FOR_COUNT, "rows_dropped": ROWS_DROPPED, "generator_ignored": GENERATOR_IGNORED}
    return [
        case("6 rows, 3 minibatches, 2 epochs, generator seeded 0: each minibatch's rows", _rows(0), shuffles),
        case("the same, seeded 5", _rows(5), shuffles),
        case("each field's rows, per minibatch", _aligned, {"fields_misaligned": FIELDS_MISALIGNED}),
        case("the returns of each minibatch", _returns,
             {"returns_next_state": RETURNS_NEXT_STATE, "returns_prompt": RETURNS_PROMPT,
              "returns_advantages": RETURNS_ADVANTAGES, "returns_values": RETURNS_VALUES}, exact=False),
        Case("inputs with a graph: [stored tensors, minibatch fields] that still require grad", _graphs, [0, 0],
             (Mistake([3, 6], GRAPH_IN_MEMORY, like=lambda out: bool(out.numel() == 2 and out.sum() > 0)),),
             atol=0.0, rtol=0.0),
    ]


def check_ReplayMemory(fn: Callable) -> None:  # noqa: N802 (named after the class it checks)
    """Check `ReplayMemory(sample_ids, attention_mask, completion_mask, logprobs, advantages, values,
    num_minibatches, batches_per_learning_phase)` and its `get_minibatches(generator=None)`, against the
    solution (`rlhf_scratch.course.solutions_parts`; the package's: `rlhf_scratch.core.memory.ReplayMemory`,
    the same rows under the same generator).

    Recognises: one shuffle for every epoch, overlapping minibatches, no shuffle, num_minibatches taken as
    the size, a minibatch dropped, the generator ignored; fields gathered with different rows; the returns
    off by one, from the prompt's values, the advantages or the values alone; the gradient graph kept.
    """
    _run("ReplayMemory", fn, _memory_cases(), REFERENCES["ReplayMemory"])


CASES: dict[str, Callable[[], list[Case]]] = {  # each exercise's cases, by name
    "TransformerWithValueHead": _value_head_cases,
    "generate": _generate_cases,
    "ReplayMemory": _memory_cases,
}
