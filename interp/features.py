"""`python -m interp.features RUN_DIR`: what did RLHF change, in sparse-autoencoder features?

    python -m interp.features RUN_DIR [--layer L] [--hook resid_post] [--dictionary batchtopk] [--crosscoder]

writes RUN_DIR/interp/features.html (figures embedded), RUN_DIR/interp/features/*.png and
RUN_DIR/interp/features/features.json. Needs SAE Lens: `pip install -e ".[sae]"`.

This is the command: it loads what a run folder names (the reference and tuned models with
`rlhf_scratch.engine.runs.load_run`, the run's prompts, its task's reward, the preset's review corpus for
the SAE's training and eval texts and the snippets) and hands them to the analyses, which read only
models, tokens, texts and a reward function:

- `interp.sae`            the SAE, trained on the reference at one site, cached, and its quality;
- `interp.feature_diff`   the same sequences through both models and one SAE: Δa per feature, the
                          share of the residual change the top features explain, what they promote;
- `interp.causal`         steering the reference with the top features, ablating them from the tuned model;
- `interp.levels`         the other levels: weight diffs, the Activation Difference Lens on validation
                          snippets, with `--crosscoder` a BatchTopK crosscoder of the two models, and
                          which directions the value head and the reward model read (`interp.head_reads`;
                          `heads_of_run` says which heads a run has);
- `interp.features_page`  all of it as features.html (`make_features_report`).

`load_or_train_sae(reference, hook_name, settings)` is `interp.sae.load_or_train` on the review
corpus, cached under `$RLHF_SCRATCH_CACHE/saes`. The method and what it found: docs/features.md.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import tyro

from interp.settings import ADL_K, ARCHITECTURES, CROSSCODER_POSITIONS, HOOKS, CrosscoderSettings, SAESettings
from rlhf_scratch.config import ConfigError
from rlhf_scratch.config.cli import parse_dataclass
from rlhf_scratch.config.command import command
from rlhf_scratch.rollout.corpus import CorpusUnavailableError, cache_dir, lm_texts

if TYPE_CHECKING:  # (torch: each is imported where it is used, after the flags are parsed)
    from transformer_lens import HookedTransformer

    from interp.head_reads import HeadReads
    from rlhf_scratch.engine.runs import LoadedRun


def default_cache_root() -> Path:
    """`$RLHF_SCRATCH_CACHE/saes` (default ~/.cache/rlhf_scratch/saes), beside the corpus."""
    return cache_dir() / "saes"


def review_texts(split: str) -> list[str]:
    """The preset's review snippets of one split, or one line saying the corpus is unavailable."""
    from interp.sae import FeaturesError

    try:
        return lm_texts(split)
    except CorpusUnavailableError as e:
        raise FeaturesError(f"review corpus: {e}") from None


def load_or_train_sae(reference: HookedTransformer, hook_name: str, settings: SAESettings,
                      cache_root: str | Path | None = None, progress: bool = True) -> tuple[Any, dict, Path, bool]:
    """The SAE for (reference, site, settings) on the review corpus (trained on its train split,
    judged on its validation split), from the cache (`default_cache_root()` unless given) or
    trained and cached now. Returns (sae, quality, cache folder, whether it was loaded from the cache)."""
    from interp.sae import load_or_train

    root = Path(cache_root) if cache_root is not None else default_cache_root()
    return load_or_train(reference, hook_name, settings, root, review_texts, progress)


def _same_model(a: str, b: str) -> bool:
    return a == b or (Path(a).exists() and Path(b).exists() and Path(a).resolve() == Path(b).resolve())


def heads_of_run(run: LoadedRun, device: str = "cpu") -> HeadReads:
    """The heads of a run that read this LM's ĥ: PPO's value head, and the reward model where it is a
    Bradley–Terry reward-model run built on the same LM; one line for each that does not."""
    from interp.head_reads import HeadReader, HeadReads
    from rlhf_scratch.algorithms.ppo import TransformerWithValueHead
    from rlhf_scratch.reward.model import is_reward_model_run, load_reward_model_run

    readers, notes = [], []
    a = run.args
    if isinstance(run.policy, TransformerWithValueHead):
        readers.append(HeadReader("value head", run.policy.value_head,
                                  "PPO's value head V(ĥ) = w₂ · ReLU(W₁ ĥ + b₁) + b₂ on the tuned model's ĥ"))
    else:
        notes.append(f"{a.algo} trains no value head: no V reads this model's residual.")
    if a.task != "sentiment":
        notes.append(f"The reward ({a.task}) is a rule on the text: it reads text, not this model's residual.")
    elif is_reward_model_run(a.reward_model):
        built_on = json.loads((Path(a.reward_model) / "config.json").read_text()).get("model", "tiny")
        if _same_model(built_on, a.model):
            readers.append(HeadReader("reward model", load_reward_model_run(a.reward_model, device).score,
                                      f"the Bradley–Terry reward model {a.reward_model}: r = w · ĥ_last + b on its own "
                                      "trunk (this LM, trained with the head on the pairs), read here in this model's basis"))
        else:
            notes.append(f"The reward model {a.reward_model} is built on {built_on}, not {a.model}: it reads another "
                         "model's residual, not this one's.")
    else:
        notes.append(f"The reward is the classifier {a.reward_model!r}, a separate model with its own embedding: "
                     "it reads text, not this model's residual.")
    return HeadReads(readers, notes)


# --- command line ---------------------------------------------------------------------------------


@dataclass
class FeaturesArgs:
    """What did RLHF change, in SAE features? Trains (or loads from the cache) an SAE on the reference
    model's activations at one site, diffs the tuned model's features against the reference's, steers
    and ablates; writes RUN_DIR/interp/features.html. Needs the `sae` extra."""

    run_dir: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="RUN_DIR")] = tyro.MISSING
    """A run folder written by `python -m rlhf_scratch.train`."""
    layer: int | None = None
    """Block of the site (None: n_layers // 2)."""
    hook: str = "resid_post"
    """The site's hook, one of interp.settings.HOOKS."""
    out: str | None = None
    """Output folder (None: RUN_DIR/interp)."""
    cache_dir: str | None = None
    """SAE cache (None: $RLHF_SCRATCH_CACHE/saes or ~/.cache/rlhf_scratch/saes)."""
    dictionary: str = ARCHITECTURES[0]
    """SAE Lens architecture of the SAE, one of interp.settings.ARCHITECTURES (standard = L1)."""
    l1_coefficient: float = SAESettings.l1_coefficient
    """L1 penalty of --dictionary standard (SAE Lens's)."""
    d_sae: int = SAESettings.d_sae
    """SAE features."""
    k: float = float(SAESettings.k)
    """BatchTopK mean active features."""
    training_tokens: int = SAESettings.training_tokens
    """Tokens the SAE trains on."""
    eval_batches: int = SAESettings.eval_batches
    """Batches the SAE's quality is measured on."""
    top_n: int = 10
    """Top changed features shown, steered and ablated."""
    n_samples: int = 64
    """Samples per steering/ablation condition."""
    n_diff: int = 64
    """Completions per model for the diff."""
    n_snippets: int = 300
    """Validation snippets searched for examples."""
    no_reward: bool = False
    """Skip steering and ablation."""
    crosscoder: bool = False
    """Also train a BatchTopK crosscoder on reference vs tuned at the site (shared / reference-only /
    tuned-only latents with latent scaling)."""
    cc_latents: int = CrosscoderSettings.d_latent
    """Crosscoder latents."""
    cc_k: float = float(CrosscoderSettings.k)
    """Crosscoder BatchTopK k."""
    cc_tokens: int = 400_000
    """Positions the crosscoder trains on, epochs over the cached ones."""
    cc_positions: int = CROSSCODER_POSITIONS
    """Distinct train-split positions cached for the crosscoder."""
    adl_k: int = ADL_K
    """First tokens per text the Activation Difference Lens averages."""
    adl_texts: int = 1000
    """Validation snippets the ADL reads (0: none)."""
    device: str = "cpu"
    """Where the models run."""
    threads: int = 1
    """Torch CPU threads (0 = torch's default)."""


def parse_args(argv: list[str]) -> FeaturesArgs:
    """The command's flags (tyro; `compare --features-crosscoder` builds each run's argv for it),
    every one checked before anything is loaded: one ConfigError line naming the flag."""
    args = parse_dataclass(FeaturesArgs, argv, default=None, prog="python -m interp.features",
                           description=" ".join(FeaturesArgs.__doc__.split()))
    for name, allowed in (("hook", HOOKS), ("dictionary", ARCHITECTURES)):
        if getattr(args, name) not in allowed:
            raise ConfigError(f"--{name}: must be one of {', '.join(allowed)}; got {getattr(args, name)!r}")
    for name in ("d_sae", "training_tokens", "top_n", "n_samples", "n_diff", "eval_batches", "cc_latents", "cc_tokens",
                 "cc_positions", "adl_k"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')}: must be >= 1; got {getattr(args, name)}")
    if args.k <= 0 or args.k > args.d_sae:
        raise ConfigError(f"--k: must be in (0, --d-sae]; got {args.k}")
    if args.cc_k <= 0 or args.cc_k > args.cc_latents:
        raise ConfigError(f"--cc-k: must be in (0, --cc-latents]; got {args.cc_k}")
    if args.l1_coefficient < 0:
        raise ConfigError(f"--l1-coefficient: must be >= 0; got {args.l1_coefficient}")
    if args.n_snippets < 0 or args.threads < 0 or args.adl_texts < 0:
        raise ConfigError("--n-snippets, --adl-texts and --threads: must be >= 0")
    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        raise ConfigError(f"{run_dir}: no such run folder")
    if not (run_dir / "config.json").is_file():
        raise ConfigError(f"{run_dir} is not a run folder (no config.json)")
    out = Path(args.out) if args.out else run_dir / "interp"
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out: {out} is a file, not a folder")
    return args


def main(argv: list[str] | None = None) -> int:
    """The command: `command()` owns its one-line errors and exit codes."""
    return command(parse_args, run, argv)


def run(args: FeaturesArgs) -> int:
    """Train or load the SAE, diff, steer and ablate; write features.html."""
    import torch

    from interp.features_page import make_features_report
    from interp.levels import DiffLevels
    from interp.sae import evaluate_sae, require_sae_lens, site_hook
    from interp.sampling import SampleSettings
    from rlhf_scratch.engine.runs import load_run
    from rlhf_scratch.reward.tasks import make_reward_fn
    from rlhf_scratch.rollout.prompts import load_prompts

    run_dir = Path(args.run_dir)
    out = Path(args.out) if args.out else run_dir / "interp"
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    require_sae_lens()
    run = load_run(run_dir, device=args.device)
    n_layers = run.reference.cfg.n_layers
    layer = n_layers // 2 if args.layer is None else args.layer
    if not 0 <= layer < n_layers:
        raise ConfigError(f"--layer: must be in 0..{n_layers - 1}; got {layer}")
    hook_name = site_hook(layer, args.hook)
    prompts = load_prompts(run.args.prompts, run.args.prefix, run.args.seed)[:256]
    reward_fn = None
    if not args.no_reward:
        reward_fn = make_reward_fn(run.args, device=args.device)
    settings = SAESettings(d_sae=args.d_sae, k=args.k, training_tokens=args.training_tokens,
                           eval_batches=args.eval_batches, architecture=args.dictionary,
                           l1_coefficient=args.l1_coefficient)
    sae, quality, folder, cached = load_or_train_sae(run.reference, hook_name, settings, args.cache_dir)
    print(f"SAE {'loaded from' if cached else 'trained and cached in'} {folder}", file=sys.stderr)
    val = review_texts("val")
    quality_tuned = evaluate_sae(sae, run.tuned, val, settings)  # the same SAE on the tuned model's activations
    snippets = val[: args.n_snippets] if args.n_snippets else []
    crosscoder = None
    if args.crosscoder:
        crosscoder = CrosscoderSettings(d_latent=args.cc_latents, k=args.cc_k, training_tokens=args.cc_tokens,
                                        seed=run.args.seed)
    levels = DiffLevels(adl_texts=val[: args.adl_texts], adl_k=args.adl_k, crosscoder=crosscoder,
                        crosscoder_texts=review_texts("train") if args.crosscoder else (),
                        crosscoder_positions=args.cc_positions, heads=heads_of_run(run, args.device))
    out.mkdir(parents=True, exist_ok=True)
    summary = make_features_report(
        run.reference, run.tuned, sae, quality, prompts, out, reward_fn,
        SampleSettings.from_args(run.args, args.n_samples, run.args.seed), n_diff=args.n_diff,
        top_n=args.top_n, snippet_texts=snippets, title=f"What did RLHF change? Features: {run_dir.name}",
        extra={"run": str(run_dir), "algo": run.args.algo, "sae_cache": str(folder)}, levels=levels,
        quality_tuned=quality_tuned)
    for line in summary["headline"]:
        print(line)
    print(f"wrote {out / 'features.html'} in {summary['seconds']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
