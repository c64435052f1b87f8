"""A Bradley–Terry reward model: the LM with a scalar head, trained on preference pairs.

    r_θ(x) = w · n̂_last(x) + b        n̂ = ln_final.hook_normalized, at the last kept token of x
    P(chosen ≻ rejected) = σ(r_θ(chosen) − r_θ(rejected))                    (Bradley–Terry)
    loss = mean −log σ(r_c − r_r − m) + c · mean((r_c + r_r)²)               (TRL's RewardTrainer)

The head reads the same vector as PPO's value head (`algorithms.ppo.policy.TransformerWithValueHead`) and the
unembedding: the residual stream after the final LayerNorm. It reads it at the last token the
tokenizer kept (right padding, so the causal mask alone keeps the padding out of every kept
token's computation), which is where `GPT2ForSequenceClassification` reads its `score` head too,
so the model exports to that class exactly (`hf_format.to_hf_reward_model`).

Training, the run folder and `load_reward_model_run` live here; the command line is
`python -m rlhf_scratch.reward_model` (see `reward_model.py`).
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor, nn
from transformer_lens import HookedTransformer
from transformer_lens.hook_points import HookPoint

from rlhf_scratch.reward.model_args import KIND, RewardModelArgs  # noqa: F401  (the args, read from here too)

# Logged every `log_every` steps (train, TRL RewardTrainer's names) and after every epoch on the
# held-out pairs (the same names with an `eval/` prefix; TRL writes `eval_`).
REWARD_MODEL_METRICS = ("loss", "accuracy", "margin", "min_reward", "mean_reward", "max_reward")
WEIGHTS_FILE = "reward_model.pt"


def calc_reward_model_loss(
    chosen_rewards: Float[Tensor, " batch"],
    rejected_rewards: Float[Tensor, " batch"],
    margin: Float[Tensor, " batch"] | float | None = None,
    center_rewards_coefficient: float | None = None,
) -> Float[Tensor, ""]:
    """The Bradley–Terry negative log-likelihood of TRL's `RewardTrainer.compute_loss` (minimised):

        loss = mean_i −log σ(r_c,i − r_r,i − m_i)  +  c · mean_i (r_c,i + r_r,i)²

    `margin` m (per pair, or one number; None = 0) asks the chosen side to win by at least m;
    `center_rewards_coefficient` c (None = no term; TRL recommends 0.01, Eisenstein et al. 2023)
    pulls the rewards toward mean zero, since the BT likelihood sees only differences.
    −log σ(z) is computed as softplus(−z) (`F.logsigmoid`), stable for any |z|.
    """
    if chosen_rewards.shape != rejected_rewards.shape:
        raise ValueError(f"calc_reward_model_loss: chosen_rewards {tuple(chosen_rewards.shape)} and "
                         f"rejected_rewards {tuple(rejected_rewards.shape)} must have the same shape")
    diff = chosen_rewards - rejected_rewards
    if margin is not None:
        diff = diff - margin
    loss = -F.logsigmoid(diff).mean()
    if center_rewards_coefficient is not None:
        loss = loss + center_rewards_coefficient * torch.mean((chosen_rewards + rejected_rewards) ** 2)
    return loss


def reward_model_metrics(
    chosen_rewards: Float[Tensor, " batch"], rejected_rewards: Float[Tensor, " batch"]
) -> dict[str, float]:
    """TRL RewardTrainer's numbers for a batch of pairs:

        accuracy = mean [r_c > r_r]     margin = mean (r_c − r_r)
        min/mean/max_reward over all 2·batch rewards
    """
    both = torch.cat([chosen_rewards, rejected_rewards]).detach()
    return {
        "accuracy": (chosen_rewards > rejected_rewards).float().mean().item(),
        "margin": (chosen_rewards - rejected_rewards).mean().item(),
        "min_reward": both.min().item(),
        "mean_reward": both.mean().item(),
        "max_reward": both.max().item(),
    }


class RewardModel(nn.Module):
    """A HookedTransformer plus a scalar head: r(x) = w · n̂_last(x) + b.

    `n̂` is `ln_final.hook_normalized` (read by a forward hook, as `TransformerWithValueHead`
    reads it), taken at the last kept token that is not the pad token — the position
    `GPT2ForSequenceClassification` reads, so `hf_format.to_hf_reward_model` scores alike. Texts
    are tokenized by the LM's tokenizer as TransformerLens set it up (BOS first; the export
    saves that tokenizer, so a `transformers` user gets the same ids), right-padded, cut at n_ctx.
    """

    base: HookedTransformer
    score: nn.Linear

    def __init__(self, base: HookedTransformer):
        super().__init__()
        self.base = base
        self.score = nn.Linear(base.cfg.d_model, 1).to(base.cfg.device)
        nn.init.normal_(self.score.weight, std=1 / math.sqrt(base.cfg.d_model + 1))
        nn.init.zeros_(self.score.bias)
        self._resid: Tensor | None = None

    @property
    def pad_token_id(self) -> int:
        tok = self.base.tokenizer
        return tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id

    def tokenize(self, texts: list[str]) -> tuple[Int[Tensor, "batch seq"], Int[Tensor, "batch seq"]]:
        """Right-padded token ids and attention mask of `texts` (BOS first, cut at n_ctx)."""
        tok = self.base.tokenizer
        tok.padding_side = "right"
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token
        batch = tok(list(texts), padding=True, truncation=True, max_length=self.base.cfg.n_ctx,
                    return_tensors="pt")
        device = self.base.cfg.device
        return batch["input_ids"].to(device), batch["attention_mask"].to(device)

    def _store(self, resid: Float[Tensor, "batch seq d_model"], hook: HookPoint) -> None:
        self._resid = resid

    def forward(
        self, input_ids: Int[Tensor, "batch seq"], attention_mask: Int[Tensor, "batch seq"]
    ) -> Float[Tensor, " batch"]:
        """r(x) for each right-padded row: the head on n̂ at the last kept, non-pad token.
        (Right padding needs no attention mask: the causal mask keeps every kept token from
        seeing the padding after it.)"""
        self.base.run_with_hooks(input_ids, return_type=None,
                                 fwd_hooks=[("ln_final.hook_normalized", self._store)])
        resid, self._resid = self._resid, None
        assert resid is not None
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        keep = attention_mask.bool() & (input_ids != self.pad_token_id)
        keep[:, 0] |= ~keep.any(-1)  # a text of pad tokens only: read its first token
        last = (positions * keep).argmax(-1)
        return self.score(resid[torch.arange(len(last)), last]).squeeze(-1)

    @torch.no_grad()
    def score_texts(self, texts: list[str], batch_size: int = 64) -> Float[Tensor, " batch"]:
        """r(x) of every text, `batch_size` at a time, without gradients (on the CPU)."""
        out = [self(*self.tokenize(texts[i : i + batch_size])).cpu() for i in range(0, len(texts), batch_size)]
        return torch.cat(out) if out else torch.zeros(0)


# --- preference data ---------------------------------------------------------------------------


class PairsError(ValueError):
    """A bad preference file or dataset: one line naming it (and the line)."""


def load_pairs(source: str) -> list[dict]:
    """Preference pairs in TRL's format: a `.jsonl` file (one object per line) or a `datasets`
    dataset (id or folder, train split), each row with string `chosen` and `rejected` and
    optionally `prompt` (then the scored texts are prompt + chosen and prompt + rejected),
    `margin`, and the gold scores `score_chosen`, `score_rejected`."""
    path = Path(source).expanduser()
    rows: list[dict] = []
    if path.suffix == ".jsonl" or path.is_file():
        if not path.is_file():
            raise PairsError(f"pairs: {source}: not found")
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as e:
            raise PairsError(f"pairs: {source}: not UTF-8 text (byte {e.start}); a .jsonl file of pairs is JSON lines") from None
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise PairsError(f"pairs: {source} line {number}: not valid JSON ({e.msg})") from None
            rows.append(_check_pair(row, f"{source} line {number}"))
    else:
        import datasets

        from rlhf_scratch.models.loading import hub_errors

        with hub_errors(source):
            try:
                data = (datasets.load_from_disk(str(path)) if (path / "dataset_info.json").is_file()
                        or (path / "dataset_dict.json").is_file() else datasets.load_dataset(source, split="train"))
            except Exception as e:  # noqa: BLE001 - not found, no train split, datasets' own failures
                from rlhf_scratch.models.loading import is_offline_error

                if is_offline_error(e):
                    raise
                raise PairsError(f"pairs: {source}: {type(e).__name__}: {(str(e).splitlines() or [''])[0]}") from None
        if isinstance(data, datasets.DatasetDict):
            data = data["train"]
        rows = [_check_pair(dict(row), f"{source} row {i}") for i, row in enumerate(data)]
    if len(rows) < 2:
        raise PairsError(f"pairs: {source}: {len(rows)} pair(s); need at least 2 (one to train, one held out)")
    check_gold_scores(rows, source)
    return rows


GOLD_KEYS = ("score_chosen", "score_rejected")


def check_gold_scores(rows: list[dict], source: str) -> None:
    """Gold scores are all or nothing: if any row carries `score_chosen`/`score_rejected`, every row
    must carry both as finite numbers (they are read after each epoch, `gold_accuracy`: a row
    without them would fail there, after the training). One PairsError line naming the first bad row."""
    if not any(key in row for row in rows for key in GOLD_KEYS):
        return
    for i, row in enumerate(rows):
        for key in GOLD_KEYS:
            value = row.get(key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                got = "missing" if key not in row else repr(value)
                raise PairsError(f"pairs: {source} row {i + 1}: {key} is {got}; other rows carry gold scores, so "
                                 f"every row must (a finite number), or none")


def _check_pair(row: object, where: str) -> dict:
    if not isinstance(row, dict):
        raise PairsError(f"pairs: {where}: not a JSON object")
    for key in ("chosen", "rejected"):
        if key not in row:
            raise PairsError(f'pairs: {where}: no "{key}" field')
        if not isinstance(row[key], str):
            raise PairsError(f'pairs: {where}: "{key}" is {type(row[key]).__name__}, not a string '
                             "(conversational pairs are not supported)")
    if not isinstance(row.get("prompt", ""), str):
        raise PairsError(f'pairs: {where}: "prompt" is not a string')
    return row


def pair_texts(rows: list[dict]) -> tuple[list[str], list[str]]:
    """(prompt + chosen, prompt + rejected) of every row."""
    return ([r.get("prompt", "") + r["chosen"] for r in rows], [r.get("prompt", "") + r["rejected"] for r in rows])


def gold_accuracy(rm_chosen: Float[Tensor, " batch"], rm_rejected: Float[Tensor, " batch"], rows: list[dict]) -> float | None:
    """mean [sign(r_c − r_r) = sign(g_c − g_r)] over the pairs whose gold scores differ: how often
    the reward model orders a pair as the gold reward does (not as the possibly noisy label);
    None when the rows carry no gold scores."""
    if not rows or "score_chosen" not in rows[0]:
        return None
    gold = torch.tensor([r["score_chosen"] - r["score_rejected"] for r in rows])
    ok = gold != 0
    if not ok.any():
        return None
    return ((rm_chosen - rm_rejected)[ok].sign() == gold[ok].sign()).float().mean().item()


# --- training ------------------------------------------------------------------------------------


def split_pairs(n: int, eval_fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """(train, held-out) indices: a seeded permutation, the last max(1, round(f·n)) held out."""
    order = list(range(n))
    random.Random(seed).shuffle(order)
    n_eval = min(max(1, round(eval_fraction * n)), n - 1)
    return sorted(order[: n - n_eval]), sorted(order[n - n_eval :])


def evaluate_pairs(
    model: RewardModel, rows: list[dict], batch_size: int = 64, center_rewards_coefficient: float | None = None
) -> dict[str, float]:
    """`eval/`-prefixed TRL metrics (and the loss) on `rows`, plus `eval/gold_accuracy` when
    the rows carry gold scores.

    `eval/loss` is the training loss on the held-out pairs, as TRL's RewardTrainer evaluates it (the
    same `compute_loss`): with each row's `margin` when the rows have one, and the centring term when
    `center_rewards_coefficient` is set — so train and eval losses are the same quantity."""
    chosen, rejected = pair_texts(rows)
    was_training = model.training
    model.eval()
    r_c, r_r = model.score_texts(chosen, batch_size), model.score_texts(rejected, batch_size)
    model.train(was_training)
    margin = torch.tensor([float(r["margin"]) for r in rows], device=r_c.device) if rows and "margin" in rows[0] else None
    metrics = {"loss": calc_reward_model_loss(r_c, r_r, margin, center_rewards_coefficient).item(),
               **reward_model_metrics(r_c, r_r)}
    gold = gold_accuracy(r_c, r_r, rows)
    if gold is not None:
        metrics["gold_accuracy"] = gold
    return {f"eval/{k}": v for k, v in metrics.items()}


# --- reading a run folder back -------------------------------------------------------------------


def is_reward_model_run(folder: str | Path) -> bool:
    """Is `folder` a run folder written by `train_reward_model` (config.json's algo is reward_model)?"""
    config = Path(folder) / "config.json"
    if not config.is_file():
        return False
    try:
        return json.loads(config.read_text()).get("algo") == KIND
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
        return False


def reward_model_classifier(run_dir: str | Path, device: str = "cpu") -> tuple:
    """A reward-model run folder as the `(classifier, tokenizer)` pair every reward function takes:
    its RewardModel converted to a one-label `GPT2ForSequenceClassification` that scores alike
    (`hf_format.to_hf_reward_model`), so `--reward-model RUN_DIR` works like `--reward-model EXPORT`."""
    from rlhf_scratch.models.hf_format import to_hf_reward_model
    from rlhf_scratch.models.loading import as_classifier

    scalar = load_reward_model_run(run_dir, device="cpu")
    with torch.random.fork_rng(devices=[]):  # building the HF model initialises weights it then overwrites
        classifier = to_hf_reward_model(scalar)
    return as_classifier(classifier, scalar.base.tokenizer, str(run_dir), device)


def check_reward_model_run(run_dir: str | Path, field: str = "reward_model") -> None:
    """A finished reward-model run folder, or a ModelFolderError of one line naming `field` and what
    the folder is instead (a policy's run is not resumed as a reward model)."""
    from rlhf_scratch.models.loading import ModelFolderError

    run_dir = Path(run_dir)
    if not (run_dir / "config.json").is_file():
        raise ModelFolderError(f"{field}: {run_dir} is not a reward-model run folder (no config.json)")
    try:
        kind = json.loads((run_dir / "config.json").read_text()).get("algo", KIND)  # (older runs: no algo)
    except (ValueError, AttributeError):
        raise ModelFolderError(f"{field}: {run_dir}/config.json is unreadable (not a JSON object)") from None
    if kind != KIND:
        raise ModelFolderError(f"{field}: {run_dir} is a {kind} run, not a reward-model run "
                               "(python -m rlhf_scratch.reward_model makes one)")
    if not (run_dir / WEIGHTS_FILE).is_file():
        raise ModelFolderError(f"{field}: {run_dir} has no {WEIGHTS_FILE} (unfinished? resume it with "
                               f"python -m rlhf_scratch.reward_model --resume {run_dir})")


def load_reward_model_run(run_dir: str | Path, device: str = "cpu") -> RewardModel:
    """The trained RewardModel of a finished reward-model run folder, in eval mode."""
    from rlhf_scratch.models.loading import load_lm

    run_dir = Path(run_dir)
    check_reward_model_run(run_dir)
    config = json.loads((run_dir / "config.json").read_text())
    weights = run_dir / WEIGHTS_FILE
    with torch.random.fork_rng(devices=[]):  # the head's throw-away initialisation must not move the run's RNG
        model = RewardModel(load_lm(config.get("model", "tiny"), device=device))
    model.load_state_dict(torch.load(weights, map_location=device, weights_only=True))
    return model.eval()
