"""Build the offline `tiny` preset from scratch: tokenizer, base LM and reward classifier.

    python -m rlhf_scratch.pretrain                   # writes ./tiny_preset/{tiny_lm,tiny_reward}
    python -m rlhf_scratch.pretrain --install         # ... and copies both into rlhf_scratch/assets
    python -m rlhf_scratch.pretrain --smoke           # seconds: a few hundred snippets, tiny sizes

Stages (seeded and deterministic for a given torch version and thread count; the shipped
assets took 22 minutes with the default single thread on a shared 2-core CPU):
1. corpus: Rotten Tomatoes snippets, seeded 80/10/10 split (`rlhf_scratch.rollout.corpus`).
2. tokenizer: byte-level BPE, 8,192 tokens, trained on the train split.
3. base LM: a GPT-2-architecture `GPT2LMHeadModel` (4 layers, 4 heads, d_model 128) trained on
   the train split (fresh + rotten + plot). Each snippet is preceded by `<|endoftext|>` and the
   snippets are packed into one token stream; training windows start at a snippet's
   `<|endoftext|>`, exactly as sampling starts from BOS. Reports validation loss and perplexity.
4. reward classifier: `GPT2ForSequenceClassification` initialised from the LM, fine-tuned on
   fresh (1) vs rotten (0) with class-balanced cross-entropy (so the prior is 50/50 and the
   reward has room in both directions), checkpoint selected on validation accuracy. Reports
   test accuracy beside a bag-of-words logistic regression, VADER's sign and the majority class.
5. headroom: 256 samples of "This movie was really" from the LM loaded as a HookedTransformer;
   the mean positive reward of the classifier must lie in [0.3, 0.7].

Both models are saved as Hugging Face folders in fp16, each with the tokenizer. The settings are
`args.PretrainArgs`; the command, `rlhf_scratch/commands/pretrain.py` (`pretrain` here does the work).
"""

from __future__ import annotations

import copy
import json
import math
import re
import shutil
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm
from transformers import GPT2Config, GPT2ForSequenceClassification, GPT2LMHeadModel
from transformers.utils import logging as hf_logging

from rlhf_scratch.commands.tiny_preset.args import PretrainArgs, check_outputs
from rlhf_scratch.commands.tiny_preset.tokenizer import save_tokenizer, train_tokenizer
from rlhf_scratch.models.loading import TINY_LM_DIR, TINY_REWARD_DIR, asset_path, load_lm
from rlhf_scratch.reward.functions import SentimentReward, reward_fn_vader
from rlhf_scratch.rollout import corpus

PROMPT = "This movie was really"


# ---------------------------------------------------------------------------------------------
# Base LM


def pack(texts: list[str], tokenizer) -> tuple[torch.Tensor, torch.Tensor]:
    """One token stream `<|endoftext|> text_1 <|endoftext|> text_2 ...` and each text's start."""
    eot = tokenizer.eos_token_id
    stream, starts = [], []
    for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]:
        starts.append(len(stream))
        stream += [eot] + ids
    return torch.tensor(stream), torch.tensor(starts)


def lm_batch(stream, starts, batch_size, n_ctx, gen) -> torch.Tensor:
    """Windows of n_ctx + 1 tokens starting at random snippet starts (wrapping at the end)."""
    idx = starts[torch.randint(len(starts), (batch_size,), generator=gen)]
    offsets = torch.arange(n_ctx + 1)
    return stream[(idx[:, None] + offsets) % len(stream)]


@torch.no_grad()
def lm_eval_loss(model, stream, n_ctx, batch_size=64) -> float:
    """Mean next-token cross-entropy over the stream cut into consecutive windows."""
    model.eval()
    n = (len(stream) - 1) // n_ctx
    x = stream[: n * n_ctx + 1]
    inputs = x[:-1].view(n, n_ctx)
    targets = x[1:].view(n, n_ctx)
    total = 0.0
    for i in range(0, n, batch_size):
        logits = model(inputs[i : i + batch_size]).logits
        total += F.cross_entropy(logits.flatten(0, 1), targets[i : i + batch_size].flatten(),
                                 reduction="sum").item()
    model.train()
    return total / targets.numel()


def lr_at(step: int, args: PretrainArgs) -> float:
    """Linear warmup, then cosine decay to 10% of the peak."""
    if step < args.lm_warmup:
        return args.lm_lr * (step + 1) / args.lm_warmup
    progress = (step - args.lm_warmup) / max(1, args.lm_steps - args.lm_warmup)
    return args.lm_lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def make_optimizer(model, lr, weight_decay):
    """AdamW, with weight decay on matrices only (nanoGPT's rule)."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95))


def train_lm(args: PretrainArgs, tokenizer, splits) -> tuple[GPT2LMHeadModel, dict]:
    eot = tokenizer.eos_token_id
    # n_ctx as well as n_positions: gpt2's config.json has both and TransformerLens reads n_ctx.
    config = GPT2Config(
        vocab_size=len(tokenizer), n_positions=args.n_ctx, n_ctx=args.n_ctx, n_embd=args.d_model,
        n_layer=args.n_layer, n_head=args.n_head, activation_function="gelu_new",
        resid_pdrop=args.dropout, embd_pdrop=args.dropout, attn_pdrop=args.dropout,
        bos_token_id=eot, eos_token_id=eot, pad_token_id=eot,
    )
    torch.manual_seed(args.seed)
    model = GPT2LMHeadModel(config)
    train_stream, train_starts = pack(corpus.lm_texts("train", splits), tokenizer)
    val_stream, _ = pack(corpus.lm_texts("val", splits), tokenizer)
    print(f"LM: {sum(p.numel() for p in model.parameters()):,} parameters; "
          f"{len(train_stream):,} train tokens, {len(val_stream):,} val tokens")

    gen = torch.Generator().manual_seed(args.seed)
    opt = make_optimizer(model, args.lm_lr, args.weight_decay)
    best = (float("inf"), None, -1)
    bar = tqdm(range(args.lm_steps), desc="LM pretraining")
    for step in bar:
        for group in opt.param_groups:
            group["lr"] = lr_at(step, args)
        x = lm_batch(train_stream, train_starts, args.lm_batch_size, args.n_ctx, gen)
        logits = model(x[:, :-1]).logits
        loss = F.cross_entropy(logits.flatten(0, 1), x[:, 1:].flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        bar.set_postfix(loss=f"{loss.item():.3f}")
        if (step + 1) % args.lm_eval_every == 0 or step + 1 == args.lm_steps:
            val = lm_eval_loss(model, val_stream, args.n_ctx)
            tqdm.write(f"  step {step + 1:5d}  train loss {loss.item():.3f}  val loss {val:.3f}")
            if val < best[0]:
                best = (val, copy.deepcopy(model.state_dict()), step + 1)
    model.load_state_dict(best[1])
    model.eval()
    return model, {"lm_val_loss": best[0], "lm_val_perplexity": math.exp(best[0]),
                   "lm_best_step": best[2], "lm_parameters": sum(p.numel() for p in model.parameters()),
                   "lm_train_tokens": len(train_stream)}


# ---------------------------------------------------------------------------------------------
# Reward classifier


def clf_batches(pairs, tokenizer, batch_size, max_len, gen=None):
    """Padded (input_ids, attention_mask, labels) batches; shuffled when `gen` is given."""
    order = torch.randperm(len(pairs), generator=gen) if gen is not None else torch.arange(len(pairs))
    for i in range(0, len(pairs), batch_size):
        chunk = [pairs[j] for j in order[i : i + batch_size].tolist()]
        enc = tokenizer([t for t, _ in chunk], padding=True, truncation=True,
                        max_length=max_len, return_tensors="pt")
        yield enc["input_ids"], enc["attention_mask"], torch.tensor([label for _, label in chunk])


@torch.no_grad()
def clf_accuracy(model, pairs, tokenizer, max_len) -> float:
    model.eval()
    correct = 0
    for ids, mask, labels in clf_batches(pairs, tokenizer, 128, max_len):
        correct += (model(input_ids=ids, attention_mask=mask).logits.argmax(-1) == labels).sum().item()
    model.train()
    return correct / max(1, len(pairs))


def train_classifier(args: PretrainArgs, lm_folder: Path, tokenizer, splits):
    train, val = corpus.sentiment_pairs("train", splits), corpus.sentiment_pairs("val", splits)
    torch.manual_seed(args.seed)
    model = GPT2ForSequenceClassification.from_pretrained(
        str(lm_folder), num_labels=2, id2label={0: "NEGATIVE", 1: "POSITIVE"},
        label2id={"NEGATIVE": 0, "POSITIVE": 1}, pad_token_id=tokenizer.pad_token_id,
        dtype=torch.float32,
    )
    model.train()
    # Class-balanced loss: weight_c = n / (2 n_c), so the learned prior is 50/50.
    counts = Counter(label for _, label in train)
    weight = torch.tensor([len(train) / (2 * counts[c]) for c in (0, 1)], dtype=torch.float32)
    steps_per_epoch = math.ceil(len(train) / args.clf_batch_size)
    total = args.clf_epochs * steps_per_epoch
    opt = make_optimizer(model, args.clf_lr, 0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / max(1, total // 10)) * max(0.0, 1 - s / total))
    gen = torch.Generator().manual_seed(args.seed)
    best = (-1.0, None, -1)
    bar = tqdm(total=total, desc="classifier fine-tuning")
    for epoch in range(args.clf_epochs):
        for ids, mask, labels in clf_batches(train, tokenizer, args.clf_batch_size,
                                             args.clf_max_len, gen):
            logits = model(input_ids=ids, attention_mask=mask).logits
            loss = F.cross_entropy(logits, labels, weight=weight)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            bar.update()
            bar.set_postfix(loss=f"{loss.item():.3f}")
        acc = clf_accuracy(model, val, tokenizer, args.clf_max_len)
        tqdm.write(f"  epoch {epoch + 1}  val accuracy {acc:.3f}")
        if acc > best[0]:
            best = (acc, copy.deepcopy(model.state_dict()), epoch + 1)
    bar.close()
    model.load_state_dict(best[1])
    model.eval()
    return model, {"clf_val_accuracy": best[0], "clf_best_epoch": best[2]}


# ---------------------------------------------------------------------------------------------
# Baselines


def bag_of_words_baseline(train, test, C: float = 1.0, min_df: int = 2) -> float:
    """Test accuracy of an L2 logistic regression on word counts (scikit-learn's defaults:
    lowercase, tokens = runs of 2+ word characters; objective C * sum(log-loss) + |w|^2 / 2),
    fitted with full-batch L-BFGS in torch."""
    def words(text):
        return re.findall(r"(?u)\b\w\w+\b", text.lower())

    df = Counter(w for text, _ in train for w in set(words(text)))
    vocab = {w: i for i, w in enumerate(sorted(w for w, n in df.items() if n >= min_df))}

    def featurize(pairs):
        rows, cols, vals = [], [], []
        for r, (text, _) in enumerate(pairs):
            for w, n in Counter(words(text)).items():
                if w in vocab:
                    rows.append(r), cols.append(vocab[w]), vals.append(float(n))
        x = torch.sparse_coo_tensor([rows, cols], vals, (len(pairs), len(vocab)),
                                    check_invariants=False)
        return x.coalesce(), torch.tensor([float(y) for _, y in pairs])

    x, y = featurize(train)
    w = torch.zeros(len(vocab), requires_grad=True)
    b = torch.zeros(1, requires_grad=True)
    opt = torch.optim.LBFGS([w, b], lr=1, max_iter=500, tolerance_grad=1e-6,
                            line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        logits = torch.sparse.mm(x, w[:, None]).squeeze(1) + b
        loss = C * F.binary_cross_entropy_with_logits(logits, y, reduction="sum") + 0.5 * w @ w
        loss.backward()
        return loss

    opt.step(closure)
    xt, yt = featurize(test)
    with torch.no_grad():
        pred = (torch.sparse.mm(xt, w[:, None]).squeeze(1) + b) > 0
    return (pred.float() == yt).float().mean().item()


def baselines(splits) -> dict:
    train, test = corpus.sentiment_pairs("train", splits), corpus.sentiment_pairs("test", splits)
    majority = Counter(label for _, label in train).most_common(1)[0][0]
    vader = reward_fn_vader([t for t, _ in test]) > 0.5
    labels = torch.tensor([label for _, label in test])
    return {
        "bow_logreg_test_accuracy": bag_of_words_baseline(train, test),
        "vader_sign_test_accuracy": (vader.long() == labels).float().mean().item(),
        "majority_test_accuracy": (labels == majority).float().mean().item(),
    }


# ---------------------------------------------------------------------------------------------
# Headroom


@torch.no_grad()
def headroom(args: PretrainArgs, lm_folder: Path, reward_folder: Path) -> tuple[dict, list[str]]:
    """Mean positive reward of the shipped-to-be classifier on LM samples of the blog's prompt."""
    model = load_lm(str(lm_folder)).eval()
    torch.manual_seed(args.seed)
    prompt = model.to_tokens(PROMPT, prepend_bos=True).repeat(args.n_samples, 1)
    tokens = model.generate(prompt, max_new_tokens=args.gen_len, temperature=1.0,
                            stop_at_eos=False, verbose=False)
    samples = model.to_string(tokens[:, 1:])  # drop BOS
    rewards = SentimentReward(str(reward_folder), "pos")(samples)
    return {"headroom_mean_pos_reward": rewards.mean().item(),
            "headroom_std_pos_reward": rewards.std().item(),
            "headroom_frac_above_half": (rewards > 0.5).float().mean().item()}, samples


# ---------------------------------------------------------------------------------------------


def save_fp16(model, tokenizer, folder: Path) -> None:
    model.to(torch.float16).save_pretrained(str(folder))
    model.to(torch.float32)
    save_tokenizer(tokenizer, folder)


def folder_mb(folder: Path) -> float:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 2**20


def pretrain(args: PretrainArgs) -> dict:
    check_outputs(args)
    torch.set_num_threads(args.threads)
    hf_logging.disable_progress_bar()  # keep our own bars readable
    torch.use_deterministic_algorithms(True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lm_folder, reward_folder = out / TINY_LM_DIR, out / TINY_REWARD_DIR
    times, t0 = {}, time.perf_counter()

    splits = corpus.get_splits(args.seed)
    if args.limit:
        splits = {name: rows[: args.limit] for name, rows in splits.items()}
    print("corpus:", {name: len(rows) for name, rows in splits.items()})

    t = time.perf_counter()
    tokenizer = train_tokenizer(corpus.lm_texts("train", splits), args.vocab_size)
    times["tokenizer_s"] = time.perf_counter() - t

    t = time.perf_counter()
    lm, metrics = train_lm(args, tokenizer, splits)
    save_fp16(lm, tokenizer, lm_folder)
    times["lm_s"] = time.perf_counter() - t
    print(f"LM: val loss {metrics['lm_val_loss']:.3f}, "
          f"perplexity {metrics['lm_val_perplexity']:.1f} (step {metrics['lm_best_step']})")

    t = time.perf_counter()
    clf, clf_metrics = train_classifier(args, lm_folder, tokenizer, splits)
    save_fp16(clf, tokenizer, reward_folder)
    # Test accuracy of the classifier as shipped (fp16 weights), loaded like any reward model.
    reward = SentimentReward(str(reward_folder), "pos")
    test = corpus.sentiment_pairs("test", splits)
    pred = reward([text for text, _ in test]) > 0.5
    clf_metrics["clf_test_accuracy"] = (
        (pred.long() == torch.tensor([label for _, label in test])).float().mean().item())
    metrics |= clf_metrics
    times["classifier_s"] = time.perf_counter() - t

    t = time.perf_counter()
    metrics |= baselines(splits)
    times["baselines_s"] = time.perf_counter() - t
    print(f"classifier test accuracy {metrics['clf_test_accuracy']:.3f} | bag-of-words "
          f"logistic regression {metrics['bow_logreg_test_accuracy']:.3f} | VADER sign "
          f"{metrics['vader_sign_test_accuracy']:.3f} | majority class "
          f"{metrics['majority_test_accuracy']:.3f}  (n_test = {len(test)})")

    t = time.perf_counter()
    head, samples = headroom(args, lm_folder, reward_folder)
    metrics |= head
    times["headroom_s"] = time.perf_counter() - t
    ok = 0.3 <= head["headroom_mean_pos_reward"] <= 0.7
    print(f"headroom: mean positive reward of {args.n_samples} samples of {PROMPT!r} = "
          f"{head['headroom_mean_pos_reward']:.3f} ({'inside' if ok else 'OUTSIDE'} [0.3, 0.7])")
    print("samples:")
    for s in samples[:8]:
        print("  " + repr(s))

    times["total_s"] = time.perf_counter() - t0
    metrics |= times
    metrics["size_mb"] = {"tiny_lm": folder_mb(lm_folder), "tiny_reward": folder_mb(reward_folder)}
    print("wall times:", ", ".join(f"{k[:-2]} {v:.0f}s" for k, v in times.items()))
    print("sizes (MB):", ", ".join(f"{k} {v:.2f}" for k, v in metrics["size_mb"].items()))
    (out / "metrics.json").write_text(json.dumps(
        {"args": asdict(args), "metrics": metrics, "samples": samples[:16]}, indent=2))

    if args.install:
        for folder in (lm_folder, reward_folder):
            dest = asset_path(folder.name)
            backup = dest.with_name(dest.name + ".bak")
            shutil.rmtree(backup, ignore_errors=True)
            if dest.exists():
                dest.rename(backup)
            shutil.copytree(folder, dest)
            print(f"installed {folder} -> {dest} (previous one kept in {backup})")
    return metrics
