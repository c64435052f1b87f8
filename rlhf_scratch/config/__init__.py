"""The fields every algorithm shares, the presets, validation and `make_args`.

    CommonArgs           what to train, the rollout (prompts, sampling, EOS), optimisation, output
    ├── RLHFArgs         PPO with the blog's names               algorithms/ppo/args.py
    ├── GroupArgs        G completions per prompt, a clipped ratio, β (TRL's names): RLOO's and GRPO's base
    │   ├── RLOOArgs     RLOO: the leave-one-out baseline         algorithms/rloo/args.py
    │   └── GRPOArgs     GRPO: loss_type (TRL's eight), ...      algorithms/grpo/args.py
    └── OnlineDPOArgs    Online DPO with TRL's names              algorithms/online_dpo/args.py

An algorithm's own dataclass lives in its folder; this module reaches it only through the registry
(`registry.py`'s "module:Name" strings), never by an import statement, so config stays below the
algorithms. `from rlhf_scratch.config import RLHFArgs` still works: a module `__getattr__` looks the
name up in the registered algorithms' args modules.

Presets fill in the model, the reward model and the hyper-parameters that suit them; anything
given on the command line wins over the preset. `validate()` is called once at start and fails
with one line naming the field and the rule. This module imports nothing heavy (no torch), so a
bad flag is answered at once.

Longer than 500 lines because `CommonArgs` is every flag the algorithms share, each with the
docstring tyro shows as its help: split up, one command's flags would be read from several files.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from rlhf_scratch.config import registry

DIRECTIONS = ("pos", "neg")
KV_CACHES = ("auto", "static", "transformer_lens")
CHAT_TEMPLATES = ("auto", "none")
FILTER_GROUPS_METRICS = ("seq_reward", "score")  # verl's filter_groups.metric, as this package's rollout has them
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune")  # torch.compile's modes (--compile-mode)
TRUNCATIONS = ("error", "left", "right")  # verl's data.truncation for a prompt over max_prompt_length
LORA_TARGETS = ("W_Q", "W_K", "W_V", "W_O", "W_in", "W_out")  # the block weights LoRA can adapt (lora.LAYOUTS)
"""What scores each task that reads no reward model (a refused --reward-model names it)."""
PROMPT_PREFIX = "prefix"  # --prompts prefix: every sample continues args.prefix (the blog)
SHIPPED_MODELS = ("tiny", "arithmetic", "arithmetic_calc")
"""The models the package ships (rlhf_scratch/assets): `tiny`, the review LM, `arithmetic`, the arithmetic
task's (`rlhf pretrain-arithmetic`), and `arithmetic_calc`, its sibling that can call the calculator
(`--env calculator`'s; `rlhf pretrain-arithmetic --calculator P`); a name, not a path."""


class ConfigError(ValueError):
    """A bad config value; its message is one line naming the field and the rule."""


def _check(ok: bool, name: str, rule: str) -> None:
    if not ok:
        raise ConfigError(f"{name}: {rule}")


def _finite(x: object) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


SEED_MAX = 2**32 - 1
"""The largest seed a run takes: numpy's `np.random.seed` (torch's and random's take more)."""


def check_seed(seed: int, name: str = "seed") -> None:
    """A seed every RNG a run seeds accepts, 0..SEED_MAX; else one line naming `name` (a study's
    `seeds` says it before any run starts)."""
    _check(seed >= 0, name, f"must be >= 0; got {seed}")
    _check(seed <= SEED_MAX, name, f"must be at most {SEED_MAX} (numpy's seed range); got {seed}")


def _type_error(value: object, hint: object) -> str | None:
    """What is wrong with `value` as a field typed `hint` (None: nothing), judged as the command
    line's parser types it: an int field takes an int (not a bool), a float field an int or a float,
    `X | None` also None, a Literal one of its values."""
    if typing.get_origin(hint) in (types.UnionType, typing.Union):
        errors = [_type_error(value, h) for h in typing.get_args(hint)]
        return None if None in errors else " or ".join(e.removeprefix("must be ") for e in errors).join(["must be ", ""])
    if typing.get_origin(hint) is Literal:
        choices = typing.get_args(hint)
        return None if value in choices else f"must be one of {', '.join(map(str, choices))}"
    if hint is type(None):
        return None if value is None else "null"
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    ok = {bool: isinstance(value, bool), int: isinstance(value, int) and not isinstance(value, bool),
          float: isinstance(value, (int, float)) and not isinstance(value, bool), str: isinstance(value, str)}
    return None if ok.get(hint, True) else f"must be {names[hint]}"


@dataclass
class CommonArgs:
    """The fields every algorithm shares."""

    ALGO: ClassVar[str] = ""
    FLAG_ALIASES: ClassVar[dict[str, str]] = {}
    """Other spellings of a flag on the command line (`--kl-coef` for PPO's `--beta`, the blog's name)."""

    # --- what to train ---------------------------------------------------------------------
    task: str = "sentiment"
    """Reward: `sentiment` (learned classifier), `vader` (lexicon sentiment), `periods` (count '.') or
    `first_token` (right/wrong: 1 if the first generated token is one of a fixed set, blind to length)."""
    preset: str = "tiny"
    """`tiny` (shipped offline LM + classifier) or `gpt2` (GPT-2 + lvwerra/distilbert-imdb, the blog's setup)."""
    model: str = "tiny"
    """Policy to tune: `tiny`, `arithmetic` (the arithmetic task's, shipped), a TransformerLens pretrained name (e.g. `gpt2`) or a local HF folder of GPT-2, Pythia, Llama, Qwen2 or Gemma (docs/models.md)."""
    reward_model: str = "tiny"
    """What scores task `sentiment`: a classifier (`tiny`, a Hub id, a local folder; label 1 = positive)
    or a reward model — a `python -m rlhf_scratch.reward_model` run folder or its export (its scalar
    is the reward). A local path is recorded absolute, with a hash of its weights checked on resume.
    `min:A,B,C` (or `mean:`, `uwo=λ:`): an ensemble of reward-model runs (reward/ensemble.py)."""
    direction: str = "pos"
    """`pos` rewards positive sentiment, `neg` negative (tasks `sentiment` and `vader`)."""
    seed: int = 1
    """Seeds torch, numpy and random once at start (and the prompt shuffle)."""
    device: str = "auto"
    """`auto` (cuda if available, else cpu), `cpu` or `cuda`."""
    threads: int = 1
    """torch CPU threads (0 = torch's default, one per core). 1 by default: the tiny model's
    matrices gain little from a second thread, and on a CPU another process is using, extra
    threads made phases 20-30x slower (docs/speed.md, "Threads")."""
    compile: bool = False
    """torch.compile the policy's forward in the learning phase (generation and scoring stay
    eager). The first phase pays for compiling (about 40 s on a 2-core CPU); see docs/speed.md."""
    compile_mode: str = "default"
    """torch.compile's mode, used only when compiling (the compile flag): `default`; `reduce-overhead`, the compiled forward and its
    backward replayed as CUDA graphs (torch's cudagraph trees: one launch for the trunk's few hundred
    kernels a minibatch; on a CPU the same as `default`); `max-autotune`, which also searches for
    matmul kernels (a longer compile) and replays CUDA graphs as well. Opt-in: not yet measured on a GPU (docs/speed.md)."""
    bf16: bool = False
    """bfloat16 autocast on the learning phase's forward (weights, optimizer and log-softmaxes stay
    float32). The rule, from the one GPU measurement there is (one H200, GPT-2 small's shape, docs/speed.md):
    it pays where a minibatch's matmuls are large, 2.8x faster at minibatches of 128 rows x 38 tokens
    (batch 512), and not at 16 rows (batch 64: 23 vs 18 ms a step, a PPO round the same). So on a GPU
    turn it on at minibatches of about 128 rows or more, leave it off below; on a CPU leave it off
    (slower). Off by default: one measurement per shape, on one GPU, is too little to set a default by."""
    kv_cache: str = "auto"
    """KV cache for sampling: `static` (preallocated, one fixed-shape step per token; CUDA-graphed on
    a GPU), `transformer_lens` (TransformerLens' own, growing by concatenation), or `auto`: the
    static cache where the model allows it (GPT-2, Pythia, Llama, Qwen2, Gemma; on a GPU GPT-2's
    set only, until the others have run on one; no hooks), else TransformerLens'.
    The same tokens either way (tested); see docs/speed.md."""
    cuda_graph: bool = True
    """On a GPU, replay the static cache's decode step as a captured CUDA graph (one launch per
    token). On by default: it ran on an H100 on 2026-11-27 and sampled the same tokens as the
    uncaptured step, generation 3.1× faster (docs/speed.md). Nothing to do on a CPU, or where the
    static cache cannot run the model (then the run says so once); --no-cuda-graph turns it off."""
    chunk_logits: int = -1
    """Most logits (positions × d_vocab) made at once when scoring and learning (`token_terms`): in
    the learning phase each chunk is recomputed in backward instead of kept, so memory grows with
    the chunk, not with minibatch × vocabulary. 0: every position at once, kept for backward (no
    recomputation). -1 (auto): 2**21 on a CPU (8 MiB of float32), 2**27 on a GPU (512 MiB), where
    small chunks leave the chip idle (docs/speed.md, "On a GPU")."""

    # --- phases and batches ----------------------------------------------------------------
    total_phases: int = 100
    """Rollout + learning phases to run."""
    batch_size: int = 64
    """Completions generated per rollout phase (all prompts x all generations per prompt)."""
    num_minibatches: int = 4
    """Minibatches each pass over the batch is split into (one optimizer step each); must divide batch_size."""

    # --- optimisation ----------------------------------------------------------------------
    base_lr: float = 1e-4
    """AdamW learning rate of the transformer."""
    max_grad_norm: float = 1.0
    """Global gradient-norm clip."""
    warmup_steps: int = 10
    """Phases of linear learning-rate warmup from 0 to 1 (times the learning rate)."""
    final_scale: float = 0.1
    """Learning-rate multiplier reached by linear decay at the last phase."""

    # --- LoRA (docs/lora.md) ---------------------------------------------------------------
    lora_rank: int = 0
    """Train low-rank adapters instead of the whole LM (`lora.py`): ΔW = (α/r)·B·A of rank r on each of
    --lora-targets in every block, the rest frozen; the reference is then the policy with its adapters
    off (no second model). 0 (default): full fine-tuning."""
    lora_alpha: float = 32.0
    """α of the adapters' scale α/r. Fixed, not tied to r: with B = 0 at the start, the first steps then
    move ΔW by about as much at every rank, so one learning rate suits every r (docs/lora.md)."""
    lora_targets: str = "W_Q,W_K,W_V,W_O,W_in,W_out"
    """The weights of every block given adapters, comma-separated, from W_Q, W_K, W_V, W_O (attention)
    and W_in, W_out (MLP). Default all six: adapting the MLPs as well as attention is what brings LoRA
    close to full fine-tuning (QLoRA, Dettmers et al. 2023; Schulman et al. 2025, "LoRA Without Regret")."""

    # --- the rollout -----------------------------------------------------------------------
    prompts: str = PROMPT_PREFIX
    """Prompt source: `prefix` (every sample continues --prefix, the blog), `rt` (review openings
    from the Rotten Tomatoes train split), a local .txt (one per line), .jsonl (`prompt` field) or
    .parquet file, or a Hugging Face dataset id or folder with a `prompt` column (--prompt-key)."""
    prefix: str = "This movie was really"
    """The prompt every sample continues when --prompts is `prefix`."""
    prepend_bos: bool = True
    """Prepend <|endoftext|> to each prompt (plain-text prompts only: a chat template writes its own
    special tokens, see --chat-template)."""
    chat_template: Literal["auto", "none"] = "auto"
    """How a prompt is given to the model. `auto`: when the model's tokenizer has a chat template
    (an instruct model's), each prompt p is rendered as one user turn followed by the assistant's
    opening, `apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True)`,
    and tokenized as rendered (no --prepend-bos: the template writes the BOS where its model wants
    one); without a template (tiny, GPT-2), plain text. `none`: plain text always. The reward, the
    logs and samples.md still see the plain prompt and the completion's own text."""
    prompt_key: str = "prompt"
    """The column (.parquet, dataset) or field (.jsonl) holding the prompts (verl's `data.prompt_key`):
    strings, or verl's chat format, lists of {"role", "content"} messages (rendered through the model's
    chat template: rollout/rl_dataset.py)."""
    max_prompt_length: int = 0
    """Most tokens of a prompt as the model is given it (verl's `data.max_prompt_length`); a longer
    one is refused, cut or dropped (--truncation, --filter-overlong-prompts). 0: no limit."""
    truncation: Literal["error", "left", "right"] = "error"
    """A prompt over --max-prompt-length: `error` (one line naming its row), `left` (keep its last
    tokens) or `right` (keep its first), verl's `data.truncation`."""
    filter_overlong_prompts: bool = False
    """Drop the prompts over --max-prompt-length instead (verl's `data.filter_overlong_prompts`)."""
    gen_len: int = 30
    """New tokens generated per sample (the most, with stop_at_eos)."""
    temperature: float = 1.0
    """Sampling temperature (> 0)."""
    top_k: int = 10
    """Sample from the top-k tokens only (0 = all). 10 is the blog's, kept for PPO; the TRL algorithms
    default to TRL's 0: top-k sampling scored with the full softmax biases the policy gradient
    (docs/fidelity.md, "Top-k")."""
    top_p: float = 1.0
    """Sample from the nucleus only: the most likely tokens whose probability (after temperature and
    top-k) first reaches top_p (TRL's `top_p`, applied as transformers' TopPLogitsWarper). 1.0, TRL's
    default: every token. Like top-k, a nucleus scored with the full softmax biases the policy gradient
    (docs/fidelity.md, "Top-k")."""
    stop_at_eos: bool | None = None
    """End a completion at its first EOS (the rest is padding, masked out of every term). Default:
    off for --prompts prefix (the blog's fixed-length samples), on for prompt datasets (a review
    opening is completed into one review, not run on into the next)."""
    missing_eos_penalty: float | None = None
    """Subtract this from the reward of a completion that never produced EOS (TRL's option)."""
    overlong_buffer: bool = False
    """DAPO's overlong reward shaping (verl's reward_model.overlong_buffer.enable; TRL's
    `get_soft_overlong_punishment` reward): a completion longer than gen_len − overlong_buffer_len tokens
    loses up to overlong_buffer_penalty_factor of its reward, linearly in its length up to gen_len
    (`rollout.phase.soft_overlong_punishment`; docs/grpo.md). Off by default."""
    overlong_buffer_len: int = 0
    """L_cache: the last this many tokens before --gen-len, where the penalty grows (verl's
    overlong_buffer.len, TRL's soft_punish_cache): 1 to gen_len, given with --overlong-buffer."""
    overlong_buffer_penalty_factor: float = 1.0
    """The penalty at gen_len tokens (verl's overlong_buffer.penalty_factor; TRL's is 1)."""
    format_weight: float = 0.0
    """Task arithmetic: r = accuracy + format_weight · format, TRL's `reward_weights` over its
    `accuracy_reward` and `format_reward` (reward/verifiable.py: an integer answer, right or wrong, earns
    the format part). 0 (default): the accuracy alone."""

    # --- multi-turn episodes (issue 58: rollout/environment.py, rollout/episodes.py) ----------
    env: str = ""
    """An environment that answers the model's turns (`calculator`: the arithmetic task's, `<calc>47*85</calc>`
    answered with `3995`): each completion is then an episode of model turns and the environment's
    observations, token in and token out, trained on the model's tokens only. Empty (default): one turn."""
    max_turns: int = 4
    """Most model turns of an episode with --env (each ends at EOS or the environment's stop token); the
    episode's tokens, the environment's included, stay within --gen-len."""

    # --- validation (verl's data.val_files, trainer.test_freq, rollout.val_kwargs.n) -----------
    val_prompts: str = ""
    """Held-out prompts the run is validated on, a source as --prompts takes (`arithmetic:test`: the
    arithmetic task's test split); their columns reach the task's evaluation (pass@1, pass@k, by
    difficulty: `eval/...` in metrics.jsonl). Empty (default, except the arithmetic task's): no validation."""
    test_freq: int = 10
    """Validate every this many phases, and after the last (verl's trainer.test_freq); also once before
    the first phase (verl's val_before_train), written to validation.jsonl as phase 0."""
    val_n: int = 8
    """Samples of each held-out prompt, at the run's temperature (verl's val_kwargs.n): pass@1 is the mean
    of c/n, pass@n the unbiased 1 − C(n−c, n)/C(n, n) (reward/pass_at_k.py)."""
    val_size: int = 0
    """Validate on the first this many held-out prompts (0: all of them)."""
    val_temperature: float = 1.0
    """The temperature the validation samples at (verl's val_kwargs.temperature), from the whole softmax
    (no top-k, no top-p): pass@k is of the model's own distribution, whatever the training samples with."""

    # --- early stopping --------------------------------------------------------------------
    early_stopping: bool = False
    """Stop when the phase KL stays above kl_threshold (or reward above reward_threshold)."""
    patience: int = 5
    """Consecutive bad phases tolerated before stopping."""
    kl_threshold: float = 2.0
    """Per-phase mean KL (nats per token) above which a phase counts as bad."""
    reward_threshold: float | None = None
    """Optional: stop once the windowed mean reward reaches this."""
    window_size: int = 10
    """Phases averaged by the reward threshold."""

    # --- output ----------------------------------------------------------------------------
    run_dir: str | None = None
    """Run folder; default runs/<task>-<direction>-<algo>-<timestamp>. An existing non-empty folder is refused."""
    wandb: bool = False
    """Log one point per phase to Weights & Biases (offline mode without network)."""
    wandb_project: str = "rlhf_scratch"
    """W&B project name."""
    table_every: int = 10
    """Print the blog's sample table every this many phases (and at the first and last); between
    tables the console shows one phase bar with reward and KL (samples.md keeps the same tables)."""
    plot_every: int = 10
    """Redraw curves.png every this many phases (and at the first and last): a plot costs about as
    much as a tenth of a tiny phase, so not every phase."""
    save_model: bool = True
    """Save the tuned policy to the run folder at the end."""
    save_every: int = 10
    """Write a checkpoint (weights, optimizer, RNG, prompt position, ...) every this many phases and
    at the end; 0 = only at the end (and on Ctrl-C / SIGTERM)."""
    keep_checkpoints: int = 2
    """How many of the newest checkpoints to keep."""
    max_skipped_steps: int = 3
    """Stop (with a checkpoint from before the fault) after this many optimizer steps in a row were
    skipped for a non-finite loss or gradient norm."""

    # ---------------------------------------------------------------------------------------
    @property
    def algo(self) -> str:
        return self.ALGO

    def validate(self) -> "CommonArgs":
        """Check every field; raise ConfigError with one line naming the first bad one."""
        _check(self.task in registry.task_names(), "task", f"must be one of {', '.join(registry.task_names())}; got {self.task!r}")
        _check(self.preset in PRESETS, "preset", f"must be one of {', '.join(PRESETS)}; got {self.preset!r}")
        _check(self.direction in DIRECTIONS, "direction", f"must be 'pos' or 'neg'; got {self.direction!r}")
        _check(self.chunk_logits >= -1, "chunk_logits", f"must be >= 0 (0 = no chunking) or -1 (auto); got {self.chunk_logits}")
        _check(self.compile_mode in COMPILE_MODES, "compile_mode",
               f"must be one of {', '.join(COMPILE_MODES)}; got {self.compile_mode!r}")
        _check(self.compile or self.compile_mode == "default", "compile_mode",
               f"needs --compile (it is torch.compile's mode); got compile_mode {self.compile_mode!r} without it")
        _check(self.kv_cache in KV_CACHES, "kv_cache", f"must be one of {', '.join(KV_CACHES)}; got {self.kv_cache!r}")
        _check(self.chat_template in CHAT_TEMPLATES, "chat_template",
               f"must be one of {', '.join(CHAT_TEMPLATES)}; got {self.chat_template!r}")
        _check(self.device in ("auto", "cpu", "cuda", "mps") or self.device.startswith("cuda:"),
               "device", f"must be auto, cpu, cuda[:N] or mps; got {self.device!r}")
        check_seed(self.seed)
        _check(self.threads >= 0, "threads", f"must be >= 0 (0 = torch's default); got {self.threads}")
        _check(self.save_every >= 0, "save_every", f"must be >= 0 (0 = only at the end); got {self.save_every}")
        for name in self._positive_ints():
            _check(getattr(self, name) >= 1, name, f"must be >= 1; got {getattr(self, name)}")
        for name in self._nonnegative_floats():
            value = getattr(self, name)
            _check(_finite(value) and value >= 0, name, f"must be a finite number >= 0; got {value}")
        _check(self.top_k >= 0, "top_k", f"must be >= 0 (0 = the whole vocabulary); got {self.top_k}")
        _check(_finite(self.val_temperature) and self.val_temperature > 0, "val_temperature",
               f"must be > 0; got {self.val_temperature}")
        _check(self.val_size >= 0, "val_size", f"must be >= 0 (0 = every held-out prompt); got {self.val_size}")
        _check(self.format_weight == 0 or self.task == "arithmetic", "format_weight",
               f"is the arithmetic task's (its format reward); got {self.format_weight} with task {self.task}")
        _check(self.env == "" or self.env in registry.env_names(), "env",
               f"must be one of {', '.join(registry.env_names())} (or empty: no environment); got {self.env!r}")
        _check(self.max_turns >= 1, "max_turns", f"must be >= 1; got {self.max_turns}")
        _check(bool(self.env) or self.max_turns == self.__dataclass_fields__["max_turns"].default, "max_turns",
               f"needs --env NAME (without an environment an episode is one turn); got max_turns {self.max_turns}")
        _check(not self.env or self.eos_stops(), "stop_at_eos",
               "must be on with --env: a model turn ends at EOS or at the environment's stop token")
        _check(not self.val_prompts or registry.get_task(self.task).evaluate is not None, "val_prompts",
               f"task {self.task} has no evaluation of its own to validate with; got {self.val_prompts!r}")
        _check(self.lora_rank >= 0, "lora_rank", f"must be >= 0 (0 = full fine-tuning); got {self.lora_rank}")
        _check(_finite(self.lora_alpha) and self.lora_alpha > 0, "lora_alpha", f"must be > 0; got {self.lora_alpha}")
        targets = self.lora_target_names()
        _check(bool(targets) and len(set(targets)) == len(targets) and set(targets) <= set(LORA_TARGETS), "lora_targets",
               f"must be distinct names from {','.join(LORA_TARGETS)}, comma-separated; got {self.lora_targets!r}")
        for name in ("lora_targets", "lora_alpha"):  # given without a rank, they would change nothing: a full fine-tune
            _check(self.lora_rank > 0 or getattr(self, name) == self.__dataclass_fields__[name].default, name,
                   f"needs --lora-rank R > 0 (0, the default, is full fine-tuning, which has no adapters); "
                   f"got {name} {getattr(self, name)!r} with lora_rank 0")
        _check(_finite(self.top_p) and 0 < self.top_p <= 1, "top_p", f"must be in (0, 1] (1 = every token); got {self.top_p}")
        _check(self.batch_size % self.num_minibatches == 0, "batch_size",
               f"must be divisible by num_minibatches ({self.batch_size} % {self.num_minibatches} != 0)")
        _check(_finite(self.temperature) and self.temperature > 0, "temperature", f"must be > 0; got {self.temperature}")
        _check(self.final_scale <= 1, "final_scale", f"must be <= 1; got {self.final_scale}")
        _check(_finite(self.kl_threshold) and self.kl_threshold > 0, "kl_threshold", f"must be > 0; got {self.kl_threshold}")
        _check(self.reward_threshold is None or _finite(self.reward_threshold), "reward_threshold",
               f"must be a finite number; got {self.reward_threshold}")
        _check(self.missing_eos_penalty is None or (_finite(self.missing_eos_penalty) and self.missing_eos_penalty >= 0),
               "missing_eos_penalty", f"must be a finite number >= 0; got {self.missing_eos_penalty}")
        _check(not self.overlong_buffer or 1 <= self.overlong_buffer_len <= self.gen_len, "overlong_buffer_len",
               f"must be in 1..gen_len ({self.gen_len}) with --overlong-buffer; got {self.overlong_buffer_len}")
        for name in ("overlong_buffer_len", "overlong_buffer_penalty_factor"):  # without the switch they would do nothing
            _check(self.overlong_buffer or getattr(self, name) == self.__dataclass_fields__[name].default, name,
                   f"needs --overlong-buffer (the penalty is off without it); got {name} {getattr(self, name)!r}")
        task = registry.TASKS[self.task]
        _check(task.reads_reward_model or self.reward_model == PRESETS[self.preset]["reward_model"], "reward_model",
               f"only task sentiment reads a reward model; task {self.task} is scored by "
               f"{task.scored_by}: drop --reward-model, or use task sentiment")
        _check(self.prompt_key != "", "prompt_key", "must name a column (verl's default: prompt)")
        _check(self.max_prompt_length >= 0, "max_prompt_length", f"must be >= 0 (0 = no limit); got {self.max_prompt_length}")
        _check(self.truncation in TRUNCATIONS, "truncation", f"must be one of {', '.join(TRUNCATIONS)}; got {self.truncation!r}")
        for name in ("truncation", "filter_overlong_prompts"):  # without a limit nothing is too long: they would do nothing
            _check(self.max_prompt_length > 0 or getattr(self, name) == self.__dataclass_fields__[name].default, name,
                   f"needs --max-prompt-length N > 0; got {name} {getattr(self, name)!r} with no limit")
        _check(self.prompts != "", "prompts", "must name a source: prefix, rt, a .txt/.jsonl/.parquet file or a dataset")
        _check(self.prompts != PROMPT_PREFIX or self.prefix != "" or self.prepend_bos, "prefix",
               "must be non-empty when prepend_bos is False (generation needs at least one token)")
        return self

    def _positive_ints(self) -> tuple[str, ...]:
        return ("total_phases", "batch_size", "num_minibatches", "gen_len", "window_size", "patience", "table_every", "plot_every",
                "keep_checkpoints", "max_skipped_steps", "test_freq", "val_n")

    def _nonnegative_floats(self) -> tuple[str, ...]:
        return ("base_lr", "max_grad_norm", "warmup_steps", "final_scale", "format_weight", "overlong_buffer_penalty_factor")

    def with_local_paths_resolved(self) -> "CommonArgs":
        """These args with every local path they name made absolute (`model`, `reward_model`, a
        prompts file or folder), so that a run folder's config means the same files wherever it is
        resumed from. Names that are not local paths (`tiny`, `rt`, a Hub id) are left as they are;
        an ensemble's members (`min:A,B`) are made absolute one by one."""
        sources = (PROMPT_PREFIX, "rt", *(f"{t.name}{split}" for t in registry.problem_sources().values()
                                          for split in ("", *(f":{s}" for s in t.splits))))  # a task's own problems
        special = {"model": SHIPPED_MODELS, "reward_model": ("tiny",), "prompts": sources, "val_prompts": ("", *sources)}
        resolved = {}
        for name, keep in special.items():
            value = getattr(self, name)
            path = Path(value).expanduser()
            if value not in keep and path.exists():
                resolved[name] = str(path.resolve())
        head, sep, rest = self.reward_model.partition(":")
        if sep and "reward_model" not in resolved:  # an ensemble, REDUCTION:RM,RM,… (reward/ensemble.py): each member
            members = [m.strip() for m in rest.split(",")]
            made = [str(Path(m).expanduser().resolve()) if m and Path(m).expanduser().exists() else m for m in members]
            if made != members:
                resolved["reward_model"] = f"{head}:{','.join(made)}"
        return dataclasses.replace(self, **resolved) if resolved else self

    def lora_target_names(self) -> tuple[str, ...]:
        """--lora-targets as names: "W_Q, W_V" -> ("W_Q", "W_V")."""
        return tuple(name.strip() for name in self.lora_targets.split(",") if name.strip())

    def eos_stops(self) -> bool:
        """Whether completions end at their first EOS (`stop_at_eos`, or its per-source default)."""
        if self.stop_at_eos is not None:
            return self.stop_at_eos
        return self.prompts != PROMPT_PREFIX

    def minibatch_size(self) -> int:
        return self.batch_size // self.num_minibatches

    def logits_per_chunk(self, device: str) -> int:
        """--chunk-logits as the run uses it on `device`: the number given, or for -1 (auto)
        2**21 on a CPU (`vocab_terms.LOGITS_PER_CHUNK`) and 2**27 on a GPU."""
        if self.chunk_logits >= 0:
            return self.chunk_logits
        return 2**27 if str(device).startswith("cuda") else 2**21

    def samples_per_group(self) -> int:
        """Completions of one prompt that must stay on one rank (RLOO's G, DPO's pair)."""
        return 1

    def filters_groups(self) -> bool:
        """Whether a phase drops the groups whose rewards are all equal and samples more (DAPO's dynamic
        sampling: `GroupArgs.filter_groups`); an algorithm without groups never does."""
        return False

    def check_world_size(self, world_size: int) -> None:
        """Under torchrun each of `world_size` ranks takes batch_size / world_size samples — whole
        prompt groups — and cuts them into num_minibatches minibatches."""
        if world_size == 1:
            return
        group = self.samples_per_group()
        _check(self.batch_size % (world_size * group) == 0, "batch_size",
               f"must divide by processes × completions per prompt = {world_size} × {group} to split over "
               f"{world_size} processes; got {self.batch_size}")
        local = self.batch_size // world_size
        _check(local % self.num_minibatches == 0, "num_minibatches",
               f"each of {world_size} processes has {local} samples, not divisible by num_minibatches "
               f"{self.num_minibatches} (batch_size must divide by processes × num_minibatches)")

    def to_dict(self) -> dict[str, Any]:
        return {"algo": self.ALGO, **dataclasses.asdict(self)}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "CommonArgs":
        """Rebuild from a saved config (CommonArgs.from_dict: the class its `algo` registers);
        an unknown key, or a value of another type than the command line would give the field
        (`"batch_size": "sixty-four"`), is an error naming that key. Renamed fields of older run
        folders are read under their new names (`RENAMED`). Not validated: `validate()` is next."""
        values = dict(values)
        algo = values.pop("algo", cls.ALGO or "ppo")
        target = args_class(algo) if cls is CommonArgs else cls
        _check(target.ALGO == algo, "algo", f"is {algo!r}, but {target.__name__} is for {target.ALGO!r}")
        for old, new in target.RENAMED.items():
            if old in values:
                values[new] = values.pop(old)
        names = {f.name for f in dataclasses.fields(target)}
        hints = typing.get_type_hints(target)
        for key, value in values.items():
            _check(key in names, key, f"is not an {target.__name__} field")
            error = _type_error(value, hints[key])
            _check(error is None, key, f"{error}; got {value!r}")
        return target(**values)

    RENAMED: ClassVar[dict[str, str]] = {}
    """Fields renamed since older run folders were written: old name -> new name."""


@dataclass
class GroupArgs(CommonArgs):
    """What the group-sampling algorithms share (RLOO, GRPO): G completions per prompt, passes over
    the batch, a clipped ratio and β. Each sets its own defaults and says what β weighs."""

    num_generations: int = 4
    """G: completions per prompt (consecutive in the batch); batch_size must divide by it."""
    num_iterations: int = 1
    """Passes over each rollout batch. With 1, the ratio is 1 (the loss REINFORCE's) only on the first
    minibatch; later minibatches are scored by a policy that has already stepped."""
    epsilon_low: float = 0.2
    """Lower clip of the ratio: 1 - epsilon_low."""
    epsilon_high: float = 0.2
    """Upper clip of the ratio: 1 + epsilon_high."""
    beta: float = 0.0
    """β of the KL to the reference."""
    filter_groups: bool = False
    """DAPO's dynamic sampling (Yu et al. 2025; verl's algorithm.filter_groups.enable): a group whose G
    rewards are all equal has every advantage 0 and teaches nothing, so it is dropped and more prompts
    are sampled until the batch is full of groups with a spread, or --max-num-gen-batches is reached
    (`engine.dataflow.roll_out_filtered`; counted as filter_groups/... in metrics.jsonl)."""
    filter_groups_metric: Literal["seq_reward", "score"] = "seq_reward"
    """What must differ inside a group for it to be kept (verl's filter_groups.metric): `seq_reward`, the
    reward the advantages read (after the missing-EOS and overlong penalties), or `score`, the reward
    function's own."""
    max_num_gen_batches: int = 10
    """The most generation batches (of batch_size / G prompts each) one phase samples, the first
    included (verl's filter_groups.max_num_gen_batches; 0: no limit; 10 as the DAPO recipe). Where verl
    raises there, the batch is filled up with dropped groups instead (counted: filter_groups/filled_groups)."""

    def samples_per_group(self) -> int:
        return self.num_generations

    def filters_groups(self) -> bool:
        return self.filter_groups

    def validate(self) -> "GroupArgs":
        super().validate()
        _check(self.num_generations >= 2, "num_generations",
               f"must be >= 2 (a group of one has no baseline); got {self.num_generations}")
        _check(self.batch_size % self.num_generations == 0, "batch_size",
               f"must be divisible by num_generations ({self.batch_size} % {self.num_generations} != 0)")
        _check(_finite(self.epsilon_low) and 0 < self.epsilon_low < 1, "epsilon_low", f"must be in (0, 1); got {self.epsilon_low}")
        _check(_finite(self.epsilon_high) and self.epsilon_high > 0, "epsilon_high", f"must be > 0; got {self.epsilon_high}")
        _check(self.filter_groups_metric in FILTER_GROUPS_METRICS, "filter_groups_metric",
               f"must be one of {', '.join(FILTER_GROUPS_METRICS)}; got {self.filter_groups_metric!r}")
        _check(self.max_num_gen_batches >= 0, "max_num_gen_batches", f"must be >= 0 (0 = no limit); got {self.max_num_gen_batches}")
        for name in ("filter_groups_metric", "max_num_gen_batches"):  # without the switch they would do nothing
            _check(self.filter_groups or getattr(self, name) == self.__dataclass_fields__[name].default, name,
                   f"needs --filter-groups (dynamic sampling is off without it); got {name} {getattr(self, name)!r}")
        return self

    def _positive_ints(self) -> tuple[str, ...]:
        return super()._positive_ints() + ("num_generations", "num_iterations")

    def _nonnegative_floats(self) -> tuple[str, ...]:
        return super()._nonnegative_floats() + ("beta",)


def __getattr__(name: str) -> Any:
    """An algorithm's args class or choice list (`RLHFArgs`, `GRPO_LOSS_TYPES`), from the args module
    its registry entry names (imported on first use: torch-free, as this module is)."""
    if name == "TASKS":  # the registered tasks (config/registry.py), read when asked
        return registry.task_names()
    if name == "SCORED_BY":
        return {task.name: task.scored_by for task in registry.TASKS.values() if task.scored_by}
    if not name.startswith("_"):
        for entry in registry.ALGORITHMS.values():
            module = importlib.import_module(entry.args_module)
            if name in vars(module):
                return vars(module)[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def args_class(algo: str) -> type[CommonArgs]:
    """The args dataclass of a registered algorithm (`registry`); one line for an unknown one."""
    _check(algo in registry.names(), "algo", f"must be one of {', '.join(registry.names())}; got {algo!r}")
    return registry.get(algo).args_class()


# Each preset is a set of field values applied over the dataclass defaults (which are tuned for
# the tiny preset: see docs/results.md). A preset value for a field an algorithm does not have
# (e.g. PPO's head_lr for RLOO) is skipped; a value given as {algo: value} applies to that
# algorithm only (the gpt2 preset's β is PPO's, from the blog).
PRESETS: dict[str, dict[str, Any]] = {
    # The shipped 4-layer review LM and classifier: runs offline on 2 CPU cores in minutes.
    "tiny": dict(model="tiny", reward_model="tiny"),
    # The blog's setup: GPT-2 small tuned against lvwerra/distilbert-imdb (needs the Hub).
    "gpt2": dict(
        model="gpt2",
        reward_model="lvwerra/distilbert-imdb",
        total_phases=100,
        batch_size=128,
        num_minibatches=4,
        batches_per_learning_phase=2,
        base_lr=2e-5,
        head_lr=5e-4,
        warmup_steps=20,
        final_scale=0.1,
        beta={"ppo": 2.5},
        gen_len=30,
        # top_k: each algorithm's default (the blog's 10 for PPO, TRL's 0 for the others)
    ),
}


def preset_values(preset: str, cls: type[CommonArgs]) -> dict[str, Any]:
    """The values `preset` gives the fields of `cls` (see PRESETS)."""
    _check(preset in PRESETS, "preset", f"must be one of {', '.join(PRESETS)}; got {preset!r}")
    return values_for(cls, PRESETS[preset])


def task_values(task: str, cls: type[CommonArgs]) -> dict[str, Any]:
    """The values task `task` brings to the fields of `cls` (its registry entry's `defaults`: the
    arithmetic task's model, prompts and gen_len), read as a preset's are; none for a task that brings
    none, or an unknown one (`validate` names it)."""
    return values_for(cls, registry.get_task(task).defaults) if task in registry.task_names() else {}


def env_values(env: str, cls: type[CommonArgs]) -> dict[str, Any]:
    """The values environment `env` brings to the fields of `cls` (its registry entry's `defaults`: the calculator's
    sibling model, its problems, an episode's gen_len), applied over the task's and under the command line's; none
    without an environment, or for an unknown one (`validate` names it)."""
    return values_for(cls, registry.get_env(env).defaults) if env in registry.env_names() else {}


def default_values(preset: str, task: str, env: str, cls: type[CommonArgs]) -> dict[str, Any]:
    """The defaults a run's flags are read over: the preset's values, then the task's (`task_values`), then the
    environment's (`env_values`). The command line's flags go over these, so a user's `--model` still wins."""
    return {**preset_values(preset, cls), **task_values(task, cls), **env_values(env, cls)}


def values_for(cls: type[CommonArgs], given: dict[str, Any]) -> dict[str, Any]:
    """The entries of `given` that are fields of `cls`; a value given as {algo: value} is that algorithm's
    only (skipped for the others)."""
    names = {f.name for f in dataclasses.fields(cls)}
    values = {}
    for key, value in given.items():
        if isinstance(value, dict):  # {algo: value}: that algorithm's only
            if cls.ALGO not in value:
                continue
            value = value[cls.ALGO]
        if key in names:
            values[key] = value
    return values


def make_args(preset: str = "tiny", algo: str = "ppo", **overrides: Any) -> CommonArgs:
    """Preset values, then the task's and the environment's (`default_values`), then `overrides` (e.g. from the command line),
    validated, for `algo`. A field's old name (`kl_coef` for PPO's `beta`) is taken as its new one."""
    cls = args_class(algo)
    overrides = {cls.RENAMED.get(k, k): v for k, v in overrides.items()}
    names = {f.name for f in dataclasses.fields(cls)}
    for key in overrides:
        _check(key in names, key, f"is not an {cls.__name__} field")
    task = overrides.get("task", cls.__dataclass_fields__["task"].default)
    env = overrides.get("env") or cls.__dataclass_fields__["env"].default
    values = {**default_values(preset, task, env, cls), **{k: v for k, v in overrides.items() if v is not None}}
    return cls(preset=preset, **values).validate()
