"""`rlhf pretrain-arithmetic` (= `python -m rlhf_scratch.pretrain_arithmetic`): build the model the
`arithmetic` task starts from, from scratch, stopped where it is partly right so RL has room.

    rlhf pretrain-arithmetic                       # writes ./arithmetic_preset/arithmetic_lm + metrics.json
    rlhf pretrain-arithmetic --install --force     # ... and replaces the shipped rlhf_scratch/assets/arithmetic_lm
    rlhf pretrain-arithmetic --smoke               # seconds: a 1-layer model, a few steps
    rlhf pretrain-arithmetic --calculator 0.25 --ops '+-*' --steps 1500 --target-pass1 1 --eval-every 500 --install --force
                                                   # the calculator sibling, assets/arithmetic_calc_lm (`--model arithmetic_calc`)

What it does, seeded and deterministic for a torch version at --threads 1:
1. a character tokenizer: `<|endoftext|>` (id 0: BOS, EOS and PAD, GPT-2's convention) and the
   characters `0123456789+-*=` one token each; a chat template that writes BOS and the user's content
   as it is, so verl's chat-message prompts (`rlhf data arithmetic`) give the model `47+85=` too;
2. a GPT-2-architecture model (`GPT2LMHeadModel`, --n-layer blocks, d_model --d-model) trained on a
   stream of problems `<|endoftext|>47+85=132<|endoftext|>` drawn as the task draws them
   (`reward.arithmetic.draw_problem`: --digits, --ops), the held-out problems never among them, with
   the loss on the answer and its EOS only (the operands are random: nothing to learn in them);
3. every --eval-every steps, held-out pass@1: the mean over the task's test problems (the first
   --test-size of `make_problems(…, seed=--data-seed)`, the split `rlhf data arithmetic` and
   `train arithmetic` hold out) of c/n, c right among --eval-samples samples at temperature 1 (the
   unbiased estimator of Chen et al. with k = 1). Training stops at the first evaluation at or above
   --target-pass1, so the model is partly right: RL has room, and pass@k at large k has more;
4. the model's held-out accuracy by difficulty (digits, op, carry) and pass@k for k = 1, 4, 16, in
   metrics.json beside the folder; with --calculator, pass@1 by op with the calculator and without it (a call
   unanswered), how often it called and how often a call or its absence was right (`calculator_report`).

The folder is a Hugging Face folder (fp16 weights, the tokenizer, a generation config whose EOS is
id 0): `load_lm`, `AutoModelForCausalLM` and `rlhf export` read it as any GPT-2.
"""

from __future__ import annotations

import json
import random
import shutil
import sys
import time
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rlhf_scratch.config.cli import given_fields, parse_dataclass
from rlhf_scratch.config.command import command
from rlhf_scratch.reward.arithmetic import DEFAULT_OPS, DIGITS, Problem, check_difficulty, draw_problem, make_problems
from rlhf_scratch.reward.calculator import CalculatorFactory, evaluate, reply_text
from rlhf_scratch.reward.pass_at_k import pass_at_k
from rlhf_scratch.reward.verifiable import accuracy_reward

if TYPE_CHECKING:
    import torch

ENDOFTEXT = "<|endoftext|>"
CHARACTERS = "0123456789+-*="
"""Every character a problem or an answer is written with; one token each, after <|endoftext|>."""
TOOL_MAX_NEW = 24
"""Most new tokens of an episode when the calculator answers (a call, its reply and the answer; within n_ctx 32)."""
CHAT_TEMPLATE = "{{ bos_token }}{% for message in messages %}{{ message['content'] }}{% endfor %}"
"""BOS, then each message's content as it is: [{"role": "user", "content": "47+85="}] is `<|endoftext|>47+85=`,
the tokens a plain prompt gets with prepend_bos (no role markers: the model has never seen any)."""


@dataclass
class ArithmeticLMArgs:
    out: str = "arithmetic_preset"
    """output folder; gets arithmetic_lm/ and metrics.json"""
    install: bool = False
    """also copy the model into the package's assets, replacing the shipped one (needs --force; the shipped one is kept as assets/arithmetic_lm.bak;
    with --calculator: assets/arithmetic_calc_lm, the calculator sibling `--model arithmetic_calc`)"""
    force: bool = False
    """allow --install to replace the shipped model"""
    seed: int = 0
    """seed of the initialisation, the training stream and the evaluation's samples"""
    threads: int = 1
    """torch CPU threads (1: bit-reproducible)"""
    digits: tuple[int, ...] = DIGITS
    """operand digits of the training problems (the task's default difficulty)"""
    ops: str = "".join(DEFAULT_OPS)
    """operations of the training problems"""
    data_seed: int = 1
    """the seed of the task's problems (`train arithmetic --seed`'s default data, `rlhf data arithmetic --seed`): its test split is held out"""
    test_size: int = 500
    """held-out problems: the first test_size of make_problems(train_size + test_size, data_seed), as `rlhf data arithmetic` splits them"""
    train_size: int = 5000
    """the task's train split size (with test_size, which problems make_problems draws: the test split depends on both)"""
    n_layer: int = 2
    """transformer blocks"""
    n_head: int = 4
    """attention heads per block"""
    d_model: int = 64
    """width of the residual stream"""
    n_ctx: int = 32
    """context length (a problem and its answer take at most 4 digits + op + = + 5 + 2 tokens at 2 digits)"""
    steps: int = 4000
    """the most optimizer steps (training stops earlier at --target-pass1)"""
    batch_size: int = 128
    """problems per optimizer step"""
    lr: float = 3e-3
    """AdamW learning rate (constant after the warmup: training stops at a target, not at a schedule's end)"""
    warmup: int = 50
    """linear warmup steps"""
    weight_decay: float = 0.1
    """AdamW weight decay on matrices"""
    eval_every: int = 50
    """held-out pass@1 every this many steps"""
    eval_samples: int = 4
    """samples per held-out problem for pass@1 during training"""
    target_pass1: float = 0.35
    """stop at the first evaluation whose held-out pass@1 is at least this"""
    report_samples: int = 16
    """samples per held-out problem for the final report (accuracy by difficulty, pass@k up to this)"""
    calculator: float = 0.0
    """the sibling model (issue 58, docs/environments.md): this share of the training problems is demonstrated with
    a call, 47*85= then <calc>47*85</calc>, the calculator's 3995=, and the answer 3995, the loss on the call and the
    answer only (the calculator's reply is masked, as RL masks it), with the sibling tokenizer (<calc>, </calc>, ?
    added); its pass@1 is then of episodes the calculator answers. 0: the shipped model's stream and tokenizer"""

    @classmethod
    def smoke(cls, **overrides) -> ArithmeticLMArgs:
        small = dict(n_layer=1, n_head=2, d_model=16, steps=6, batch_size=16, warmup=1, eval_every=3, eval_samples=2,
                     test_size=20, train_size=50, report_samples=4)
        return cls(**{**small, **overrides})


# --- the tokenizer --------------------------------------------------------------------------------


CALCULATOR_TOKENS = ("<calc>", "</calc>", "?")
"""The calculator environment's call, its end and its error (reward/calculator.py), one token each, ids 15-17
of the sibling tokenizer (`build_tokenizer(calculator=True)`); the shipped tokenizer has none of them."""


def build_tokenizer(calculator: bool = False):
    """The character tokenizer (see the module docstring) as a Hugging Face fast tokenizer; with
    `calculator`, the sibling's: the same ids 0-14, then `CALCULATOR_TOKENS` as whole tokens."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {ENDOFTEXT: 0, **{c: i + 1 for i, c in enumerate(CHARACTERS)}}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=ENDOFTEXT))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens([ENDOFTEXT])
    if calculator:
        tok.add_tokens(list(CALCULATOR_TOKENS))  # matched whole, before the split into characters
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=ENDOFTEXT, eos_token=ENDOFTEXT, unk_token=ENDOFTEXT, pad_token=ENDOFTEXT,
        model_max_length=1024, padding_side="right", clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


# --- the training stream --------------------------------------------------------------------------


def held_out(args: ArithmeticLMArgs) -> list[Problem]:
    """The task's test split: the first test_size problems of the task's make_problems call."""
    return make_problems(args.train_size + args.test_size, args.data_seed, digits=args.digits, ops=args.ops)[: args.test_size]


def training_batch(rng: random.Random, args: ArithmeticLMArgs, excluded: set[str], eos: int, encode,
                   calls: tuple[int, int] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """`batch_size` problems drawn as the task draws them, none of `excluded`, as right-padded rows
    `<eos> prompt answer <eos>` and the mask of the positions whose next token is learned (the answer
    and its EOS). With `calls` (the ids of <calc> and </calc>: --calculator), a share --calculator of the rows
    is `<eos> prompt <calc>expr</calc> result= answer <eos>`, the result and its end `=` (the calculator's reply,
    `reward.calculator.reply_text`) not learned."""
    import torch

    rows, learned = [], []
    while len(rows) < args.batch_size:
        problem = draw_problem(rng, args.digits, tuple(args.ops))
        if problem.prompt in excluded:
            continue
        prompt, answer = encode(problem.prompt), encode(problem.ground_truth) + [eos]
        if calls is not None and rng.random() < args.calculator:  # (no draw without --calculator: the stream as shipped)
            call, result = [calls[0], *encode(problem.prompt[:-1]), calls[1]], encode(reply_text(evaluate(problem.prompt[:-1])))
            rows.append([eos] + prompt + call + result + answer)
            learned.append([False] * len(prompt) + [True] * len(call) + [False] * len(result) + [True] * len(answer))
            continue
        rows.append([eos] + prompt + answer)
        learned.append([False] * len(prompt) + [True] * len(answer))  # position i predicts token i + 1
    width = max(map(len, rows))
    ids = torch.full((len(rows), width), eos, dtype=torch.long)
    mask = torch.zeros((len(rows), width - 1), dtype=torch.bool)
    for i, (row, keep) in enumerate(zip(rows, learned)):
        ids[i, : len(row)] = torch.tensor(row)
        mask[i, : len(keep)] = torch.tensor(keep)
    return ids, mask


# --- evaluation -----------------------------------------------------------------------------------


def sample_answers(model, tokenizer, prompts: list[str], n: int, generator: torch.Generator, max_new: int = 6,
                   tools: CalculatorFactory | None = None, calls: list[list[int]] | None = None) -> list[list[str]]:
    """`n` completions of each prompt, sampled at temperature 1 from the full softmax, cut at EOS:
    prompts of one length are one batch (no padding), each row re-run whole per new token (a few tokens).
    With `tools`, episodes: the calculator answers each call (`ToolRows`) and the answer is the last turn;
    `calls`, when given, gets each prompt's list of its samples' call counts."""
    import torch

    with torch.no_grad():
        return _sample_answers(model, tokenizer, prompts, n, generator, max_new, tools, calls)


class ToolRows:
    """The calculator answering each row of a lockstep batch, one token a step so the batch stays rectangular:
    a row that samples </calc> is fed the calculator's reply (reward/calculator.py), token by token, in place
    of its next samples; `turn_start` is where each row's current turn began (its answer: the last turn)."""

    def __init__(self, factory: CalculatorFactory, rows: int, start: int):
        self.envs, self.close = [factory("") for _ in range(rows)], factory.stop_ids[0]
        self.pending: list[list[int]] = [[] for _ in range(rows)]
        self.turn_start = [start] * rows

    def force(self, token: torch.Tensor) -> list[bool]:
        """Put each row's next pending reply token in place of its sample; which rows were fed."""
        fed = [bool(queue) for queue in self.pending]
        for row, queue in enumerate(self.pending):
            if queue:
                token[row] = queue.pop(0)
        return fed

    def after(self, ids: torch.Tensor, fed: list[bool]) -> None:
        """After a step: a reply fed out starts a new turn; a sampled </calc> is a call, answered."""
        for row, was_fed in enumerate(fed):
            if was_fed and not self.pending[row]:
                self.turn_start[row] = ids.shape[1]
            elif not was_fed and int(ids[row, -1]) == self.close:
                turn = tuple(ids[row, self.turn_start[row]:].tolist())
                self.pending[row] = list(self.envs[row].step(turn).observation)


def _sample_answers(model, tokenizer, prompts, n, generator, max_new, tools=None, calls=None):
    import torch

    eos = tokenizer.eos_token_id
    out: list[list[str]] = [[] for _ in prompts]
    made: list[list[int]] = [[] for _ in prompts]
    by_length: dict[int, list[int]] = defaultdict(list)
    encoded = [[eos] + tokenizer.encode(p, add_special_tokens=False) for p in prompts]
    for i, ids in enumerate(encoded):
        by_length[len(ids)].append(i)
    for length, members in sorted(by_length.items()):
        ids = torch.tensor([encoded[i] for i in members for _ in range(n)])
        done = torch.zeros(len(ids), dtype=torch.bool)
        rows = None if tools is None else ToolRows(tools, len(ids), length)
        for _ in range(max_new):
            probs = torch.softmax(model(ids).logits[:, -1].float(), dim=-1)
            token = torch.multinomial(probs, 1, generator=generator).squeeze(1)
            fed = None if rows is None else rows.force(token)
            token[done] = eos
            done |= token == eos
            ids = torch.cat([ids, token[:, None]], dim=1)
            if rows is not None:
                rows.after(ids, fed)
            if done.all():
                break
        for row, i in enumerate(r for r in members for _ in range(n)):
            completion = ids[row, length if rows is None else rows.turn_start[row]:].tolist()
            completion = completion[: completion.index(eos)] if eos in completion else completion
            out[i].append(tokenizer.decode(completion))
            made[i].append(0 if rows is None else rows.envs[row].calls)
    if calls is not None:
        calls.extend(made)
    return out


def correct_counts(model, tokenizer, problems: list[Problem], n: int, seed: int, tools: CalculatorFactory | None = None,
                   samples_out: list[list[tuple[bool, bool]]] | None = None) -> list[int]:
    """c for each problem: how many of `n` samples `accuracy_reward` calls right (with `tools`: episodes'
    last turns, the calculator answering); `samples_out`, when given, gets each problem's (called, right) per sample."""
    import torch

    model.eval()
    calls: list[list[int]] = []
    samples = sample_answers(model, tokenizer, [p.prompt for p in problems], n, torch.Generator().manual_seed(seed),
                             max_new=6 if tools is None else TOOL_MAX_NEW, tools=tools, calls=calls)
    right = [accuracy_reward(completions=s, ground_truth=[p.ground_truth] * n) for p, s in zip(problems, samples)]
    if samples_out is not None:
        samples_out.extend([(c > 0, r == 1.0) for c, r in zip(cs, rs)] for cs, rs in zip(calls, right))
    model.train()
    return [int(sum(rs)) for rs in right]


def mean_pass(counts: list[int], n: int, k: int) -> float:
    return sum(pass_at_k(n, c, k) for c in counts) / len(counts)


def by_op(problems: list[Problem], counts: list[int], n: int) -> dict[str, float]:
    """The mean of count / n over the held-out problems of each op (pass@1 of each op, or the share that called)."""
    ops: dict[str, list[int]] = defaultdict(list)
    for p, c in zip(problems, counts):
        ops[p.op].append(c)
    return {op: sum(cs) / (n * len(cs)) for op, cs in sorted(ops.items())}


def calculator_report(model, tokenizer, test: list[Problem], n: int, seed: int, samples: list[list[tuple[bool, bool]]]) -> dict:
    """What a calculator sibling does with and without the calculator (`samples`: each problem's (called, right)
    per sample of the report, the calculator answering): pass@1 by op both ways, the share of episodes that called
    by op, and the share right of the episodes that called and of those that did not, by op. Without the
    calculator a call is answered by nothing: the model's own tokens follow it, and the answer is its whole text."""
    without = correct_counts(model, tokenizer, test, n, seed, None)
    ops = sorted({p.op for p in test})
    flat = {op: [s for p, per in zip(test, samples) if p.op == op for s in per] for op in ops}

    def share(rows: list[bool]) -> float | None:
        return sum(rows) / len(rows) if rows else None

    return {"with_calculator": {"pass@1": mean_pass([sum(r for _, r in per) for per in samples], n, 1),
                                "by_op": {op: share([r for _, r in flat[op]]) for op in ops}},
            "without_calculator": {"pass@1": mean_pass(without, n, 1), "by_op": by_op(test, without, n)},
            "call_rate": share([c for per in samples for c, _ in per]),
            "call_rate_by_op": {op: share([c for c, _ in flat[op]]) for op in ops},
            "right_when_called_by_op": {op: share([r for c, r in flat[op] if c]) for op in ops},
            "right_when_not_called_by_op": {op: share([r for c, r in flat[op] if not c]) for op in ops}}


def by_difficulty(problems: list[Problem], counts: list[int], n: int) -> dict[str, dict]:
    """pass@1 and the number of problems in each (digits, op, carry) cell of the held-out set."""
    cells: dict[str, list[int]] = defaultdict(list)
    for p, c in zip(problems, counts):
        cells[f"digits={p.digits} op={p.op} carry={'yes' if p.carry else 'no'}"].append(c)
    return {cell: {"problems": len(cs), "pass@1": mean_pass(cs, n, 1)} for cell, cs in sorted(cells.items())}


# --- training -------------------------------------------------------------------------------------


class ArithmeticLMError(ValueError):
    """A refused output or install (one line)."""


def check_outputs(args: ArithmeticLMArgs) -> None:
    """Refuse, before any work, a bad difficulty, a non-empty --out, or an --install without --force."""
    check_difficulty(args.digits, tuple(args.ops), "any")
    out = Path(args.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ArithmeticLMError(f"out: {out} exists and is not empty; choose another --out")
    if args.install and not args.force:
        raise ArithmeticLMError("install: would replace the shipped arithmetic model in the package's assets; add --force "
                                "(the current one is kept as arithmetic_lm.bak)")
    if not 0 < args.target_pass1 <= 1:
        raise ArithmeticLMError(f"target_pass1: must be in (0, 1]; got {args.target_pass1}")
    if not 0 <= args.calculator <= 1:
        raise ArithmeticLMError(f"calculator: must be in [0, 1] (a share of the demonstrations); got {args.calculator}")


def build(args: ArithmeticLMArgs) -> dict:
    """Train the model (see the module docstring); its metrics."""
    import torch
    import torch.nn.functional as F
    from tqdm.auto import tqdm
    from transformers import GenerationConfig, GPT2Config, GPT2LMHeadModel

    from rlhf_scratch.models.loading import ARITHMETIC_CALC_LM_DIR, ARITHMETIC_LM_DIR, asset_path

    check_outputs(args)
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    start = time.perf_counter()
    tokenizer = build_tokenizer(calculator=args.calculator > 0)
    eos = tokenizer.eos_token_id
    tools = CalculatorFactory(tokenizer) if args.calculator > 0 else None
    calls = None if tools is None else tools.ids[:2]
    config = GPT2Config(
        vocab_size=len(tokenizer), n_positions=args.n_ctx, n_ctx=args.n_ctx, n_embd=args.d_model, n_layer=args.n_layer,
        n_head=args.n_head, activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        bos_token_id=eos, eos_token_id=eos, pad_token_id=eos,
    )
    torch.manual_seed(args.seed)
    model = GPT2LMHeadModel(config)
    test = held_out(args)
    excluded = {p.prompt for p in test}
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay}, {"params": rest, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))
    rng = random.Random(args.seed)
    encode = lambda text: tokenizer.encode(text, add_special_tokens=False)  # noqa: E731
    curve, reached = [], None
    bar = tqdm(range(1, args.steps + 1), desc="arithmetic LM")
    for step in bar:
        for group in opt.param_groups:
            group["lr"] = args.lr * min(1.0, step / args.warmup)
        ids, learned = training_batch(rng, args, excluded, eos, encode, calls)
        logits = model(ids[:, :-1]).logits
        loss = F.cross_entropy(logits[learned], ids[:, 1:][learned])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        bar.set_postfix(loss=f"{loss.item():.3f}")
        if step % args.eval_every == 0 or step == args.steps:
            counts = correct_counts(model, tokenizer, test, args.eval_samples, args.seed + step, tools)
            curve.append({"step": step, "loss": loss.item(), "pass@1": mean_pass(counts, args.eval_samples, 1)})
            tqdm.write(f"  step {step:5d}  loss {loss.item():.3f}  held-out pass@1 {curve[-1]['pass@1']:.3f}")
            if curve[-1]["pass@1"] >= args.target_pass1:
                reached = step
                break
    bar.close()
    model.eval()
    n = args.report_samples
    samples: list[list[tuple[bool, bool]]] = []
    counts = correct_counts(model, tokenizer, test, n, args.seed + 10**6, tools, samples)
    ks = [k for k in (1, 4, 16, 64, 256) if k <= n]
    metrics = {
        "stopped_at_step": curve[-1]["step"] if curve else 0, "reached_target": reached is not None,
        "parameters": sum(p.numel() for p in model.parameters()), "held_out_problems": len(test),
        "report_samples": n, **{f"pass@{k}": mean_pass(counts, n, k) for k in ks},
        "by_difficulty": by_difficulty(test, counts, n), "curve": curve,
    }
    if tools is not None:
        metrics["calculator"] = calculator_report(model, tokenizer, test, n, args.seed + 10**6, samples)
    metrics["seconds"] = time.perf_counter() - start
    out = Path(args.out)
    folder = out / ARITHMETIC_LM_DIR
    folder.mkdir(parents=True, exist_ok=True)
    model.to(torch.float16).save_pretrained(str(folder))
    GenerationConfig(bos_token_id=eos, eos_token_id=eos, pad_token_id=eos).save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    metrics["size_mb"] = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 2**20
    (out / "metrics.json").write_text(json.dumps({"args": asdict(args), "metrics": metrics}, indent=2) + "\n")
    print(f"held-out pass@1 {metrics['pass@1']:.3f}" + "".join(f", pass@{k} {metrics[f'pass@{k}']:.3f}" for k in ks[1:])
          + f" ({len(test)} problems, {n} samples each); stopped at step {metrics['stopped_at_step']}"
          + ("" if reached else f" without reaching --target-pass1 {args.target_pass1}")
          + f"; {metrics['seconds']:.0f} s; {metrics['size_mb']:.2f} MB in {folder}")
    for cell, row in metrics["by_difficulty"].items():
        print(f"  {cell:<28} pass@1 {row['pass@1']:.3f}  ({row['problems']} problems)")
    if "calculator" in metrics:
        report = metrics["calculator"]
        for op, rate in report["call_rate_by_op"].items():
            print(f"  op {op}: pass@1 {report['with_calculator']['by_op'][op]:.3f} with the calculator, "
                  f"{report['without_calculator']['by_op'][op]:.3f} without; called in {rate:.0%}")
    if args.install:
        dest = asset_path(ARITHMETIC_CALC_LM_DIR if args.calculator > 0 else ARITHMETIC_LM_DIR)  # the sibling beside the shipped one
        backup = dest.with_name(dest.name + ".bak")
        shutil.rmtree(backup, ignore_errors=True)
        if dest.exists():
            dest.rename(backup)
        shutil.copytree(folder, dest)
        print(f"installed {folder} -> {dest}" + (f" (previous one kept in {backup})" if backup.exists() else ""))
    return metrics


@dataclass
class ArithmeticLMCommand(ArithmeticLMArgs):
    smoke: bool = False
    """tiny sizes (ArithmeticLMArgs.smoke); finishes in seconds. Flags given beside it still win."""


def parse(argv: list[str]) -> ArithmeticLMArgs:
    cmd = parse_dataclass(ArithmeticLMCommand, argv, default=ArithmeticLMCommand(), prog="rlhf pretrain-arithmetic",
                          description=__doc__.split("\n\n")[0])
    given = given_fields(cmd, ArithmeticLMCommand())
    args = ArithmeticLMArgs.smoke(**given) if given.pop("smoke", False) else ArithmeticLMArgs(**given)
    check_outputs(args)
    return args


def main(argv: list[str] | None = None) -> int:
    return command(parse, lambda args: build(args) and 0, argv)


if __name__ == "__main__":
    sys.exit(main())

