"""Reward-model over-optimisation (Gao, Schulman & Hilton 2022), reproduced at tiny scale.

    python -m rlhf_scratch.overoptimization --out study/                       # the defaults below
    python -m rlhf_scratch.overoptimization --out study/ --seeds 1,2,3         # the same, three seeds (or more later)
    python -m rlhf_scratch.overoptimization --rm-pairs 250,1000 --algos ppo,bon --total-phases 30 --out s/
    python -m rlhf_scratch.overoptimization --quick --seeds 1,2 --out s/       # tiny: tests and notebooks (`QUICK`)

Seeds (`--seeds`, `--seed N` the same as `--seeds N`): the first seeds the prompts' split, the
gold pairs and the proxies, which every seed shares (each method meets the same proxies, so the
methods are compared seed by seed, paired); best-of-n's sampling and every RL run happen once per
seed, each its own unit (`bon-s2`, `rloo-s2-rm250`). The same command with more seeds continues a
study: only the new seeds' units run.

1. Gold-labelled pairs, once: `preferences.make_preference_pairs` on training prompts (the gold
   is the tiny classifier's log-odds, labels drawn by Bradley–Terry), max(--rm-pairs) of them
   plus --test-pairs more that no proxy trains on. Smaller sizes are prefixes of the big file.
2. One proxy reward model per size (`python -m rlhf_scratch.reward_model`, own process); its
   accuracy against gold on the common test pairs goes in the table.
3. Best-of-n from the reference on the held-out prompts, per seed: n = 1, 2, 4 … --bon-max, the
   sample the proxy ranks first, scored by gold. KL_bon = log n − (n−1)/n; the expectation over the
   n-subsets of the --bon-max samples is exact (the i-th best of N is the best of a random n-subset
   with probability C(i−1, n−1)/C(N, n)).
4. Every RL algorithm of the registry against every proxy, per seed, each run its own process
   (resumable, a run folder each: `overoptimization_run`). After every --eval-every-th phase (and the
   last) the policy is evaluated on the same held-out prompts (`HeldOutEvaluation`, a `loop.PhaseHook`):
   gold and proxy reward, gold's standard error (prompts held fixed), and KL(π‖π_ref) = the
   full-vocabulary per-token KL summed over the completion, averaged over samples — one estimator for
   every algorithm; d = √KL. Plus the KL-penalty sweep (--kl-sweep): PPO against the smallest proxy
   at each β given (`ppo-s1-b0.3`), β = 0 among them.
5. Gao et al.'s functional forms, fitted by least squares per (method, proxy size) to the gold
   reward's gain over the reference, R = gold − gold(π_ref):

       R_bon(d) = d(α − β d)        peak at d* = α / 2β,          R* = α² / 4β
       R_RL(d)  = d(α − β log d)    peak at d* = exp(α/β − 1),   R* = β d*

   through the points of every seed.
6. The verdict, per proxy size: which method's gold gain is highest at matched KL — at d_match,
   the largest d that every run against that proxy reached, each run's gold read off its curve
   there (linearly between its two points around d_match) — named only when the seeds resolve it
   (`stats.verdict`: paired over seeds). Read at one d, not as the highest point up to it: the
   highest of 30 noisy RL points sits above the curve by the noise's reach, best-of-n's 9 exact
   ones do not, and that bias would favour RL.
7. The KL penalty against early stopping (Gao et al. 2022, §3.6: the penalty acted like early
   stopping): each β > 0 run's final (d, gold) against the β = 0 run of the same seed at that d —
   its checkpoint where it first reached that KL (`kl_sweep_rows`), the gap paired over seeds.

Writes OUT/table.md and table.json (a row per method and proxy size: n seeds, and the gold at
matched d, the gold peak, the final gold, proxy and d, each the mean ± its 95 % interval over the
seeds), overoptimization.png (gold solid with its band over seeds, proxy dashed, against d, one
colour per proxy size, one panel per method) and index.html (the verdicts first, then the figure,
the table, the KL-penalty sweep with its figure kl_sweep.png, and samples at each run's gold peak and
at its end, of the first seed); OUT/times.json
has what each part and process took. Run the same command again to continue an interrupted study
(`studies.runner`).
"""

from __future__ import annotations

import json
import math
import sys
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict
from functools import partial
from pathlib import Path

from rlhf_scratch.config import ConfigError
from rlhf_scratch.studies.base import Study
from rlhf_scratch.studies.overoptimization.formulas import best_of_n_expectation, kl_bon
from rlhf_scratch.studies.overoptimization.plan import (
    BON,
    PLAN_FILE,
    PROG,
    QUICK,
    TIMES_FILE,
    StudyArgs,
    bon_file,
)
from rlhf_scratch.studies.overoptimization.report import ACCURACY_FILE, write_study_report
from rlhf_scratch.studies.overoptimization.run import rl_command
from rlhf_scratch.studies.runner import Job, Ledger, Unit, run_jobs


def check_context(args: StudyArgs) -> None:
    """Every review opening the study may use, plus --gen-len tokens, must fit the tiny model's context:
    one line naming the first that does not, before the study folder is made (a half-made folder
    would hold the bad plan and refuse the corrected command)."""
    from rlhf_scratch.models.loading import load_lm
    from rlhf_scratch.rollout import prompts

    try:
        prompts.check_context(load_lm("tiny"), one_line_openings(args.data_seed), args.gen_len, "rt")
    except prompts.PromptError as e:  # bad input: exit 2, nothing written
        raise ConfigError(str(e)) from None


def one_line_openings(seed: int) -> list[str]:
    """The review openings (`rt`) in `seed`'s order, those of one line: the prompts a study splits
    into its held-out and its training prompts."""
    from rlhf_scratch.rollout.prompts import load_prompts

    return [p for p in load_prompts("rt", seed=seed) if "\n" not in p]


DESCRIPTION = __doc__.split("\n\n")[0]
"""--help's first paragraph: the module docstring's."""


class OverOptimizationStudy(Study[StudyArgs]):
    """The over-optimisation study as a `Study`: its units are gold pairs, proxy reward models,
    best-of-n per seed and RL runs of its own process (`run.py`), so it says how to check and run
    them; the folder, the plan, the ledger and the printing are the base's."""

    prog, description, args_class, quick = PROG, DESCRIPTION, StudyArgs, QUICK
    aliases = {"--seed": "--seeds"}
    plan_file, ledger_file = PLAN_FILE, TIMES_FILE

    def check(self, args: StudyArgs, out: Path) -> None:
        """The context check (`check_context`), unless --report trains nothing."""
        if not args.report:
            check_context(args)

    def timed(self, args: StudyArgs, ledger: Ledger) -> AbstractContextManager:
        """The wall time of the whole call (study_wall_s in times.json), unless --report."""
        return nullcontext() if args.report else ledger.timing("study_wall")

    def run_units(self, args: StudyArgs, out: Path, ledger: Ledger) -> None:
        """Steps 1–4 of the module docstring, each skipped where its result is already in OUT (--report:
        the pairs, proxies and their accuracies only)."""
        import torch

        if args.threads:
            torch.set_num_threads(args.threads)
        train_file, eval_file = split_prompts(out, args)
        pairs = gold_pairs(out, args, train_file, ledger)
        proxies = proxy_dirs(out, args)
        run_jobs([Job(f"rm-{n}", partial(proxy_command, pairs, n, out, args), rm_dir) for n, rm_dir in proxies.items()],
                 ledger, parallel=args.jobs, desc="proxy reward models", unit="model")
        proxy_accuracies(proxies, pairs[max(args.sizes()):], out)
        if args.report:
            return
        for seed in args.seed_list() if BON in args.methods() else []:
            if not bon_file(out, seed).is_file():
                with ledger.timing(Unit(BON, seed).name):
                    bon = best_of_n_study(proxies, eval_file.read_text().splitlines(), args, seed)
                    bon_file(out, seed).write_text(json.dumps(bon, indent=1))
        run_jobs([Job(u.name, partial(rl_command, rl_spec(u, args, out, proxies, train_file, eval_file)),
                      self.run_dir(out, u), args.total_phases, asdict(u)) for u in args.rl_units()],
                 ledger, parallel=args.jobs, desc="RL runs", unit="phase")

    def report(self, args: StudyArgs, out: Path, ledger: Ledger) -> str:
        """Steps 5–7: the table, the figures and the page (`report.write_study_report`); the verdicts
        and the table to print."""
        accuracy = json.loads((out / ACCURACY_FILE).read_text())
        page = write_study_report(args, out, accuracy, ledger.seconds())
        data = json.loads((out / "table.json").read_text())
        return "\n".join(["\n".join(data["verdicts"] + data["kl_sweep"]["verdicts"]) + "\n",
                          (out / "table.md").read_text(), f"wrote {page}"])


def proxy_dirs(out: Path, args: StudyArgs) -> dict[int, Path]:
    """{proxy size: its reward-model run folder, OUT/rm-<size>}."""
    return {n: out / f"rm-{n}" for n in args.sizes()}

def rl_spec(unit: Unit, args: StudyArgs, out: Path, proxies: dict[int, Path], train_file: Path, eval_file: Path) -> dict:
    """One RL run, as its process reads it (`overoptimization_run.train_against_proxy`): the tiny
    preset against the proxy (a sweep run: the smallest, at its β), whole-vocabulary sampling (so its
    KL is the KL of what is sampled)."""
    tag, value = unit.setting
    proxy = proxies[value] if tag == "rm" else proxies[min(proxies)]
    return {"algo": unit.method, "proxy": str(proxy), "run_dir": str(out / "runs" / unit.name),
            "train_prompts": str(train_file), "eval_prompts": str(eval_file), "per_prompt": args.eval_per_prompt,
            "eval_every": args.eval_every, "train_fields": args.rl_fields(unit)}


def split_prompts(out: Path, args: StudyArgs) -> tuple[Path, Path]:
    """OUT/prompts_eval.txt (the first --eval-prompts of the shuffled review openings: held out) and
    OUT/prompts_train.txt (the rest: pairs and RL), made once."""
    import random

    from rlhf_scratch.rollout.prompts import load_prompts

    train_file, eval_file = out / "prompts_train.txt", out / "prompts_eval.txt"
    if not eval_file.is_file():
        prompts = load_prompts("rt", seed=args.data_seed)
        random.Random(args.data_seed).shuffle(prompts)
        prompts = [p for p in prompts if "\n" not in p]
        eval_file.write_text("\n".join(prompts[: args.eval_prompts]) + "\n")
        train_file.write_text("\n".join(prompts[args.eval_prompts :]) + "\n")
    return train_file, eval_file


def gold_pairs(out: Path, args: StudyArgs, train_file: Path, ledger: Ledger) -> list[dict]:
    """OUT/pairs.jsonl, made once: max(--rm-pairs) training pairs, then --test-pairs test pairs."""
    from rlhf_scratch.reward.preferences import make_preference_pairs, write_pairs

    pairs_file, n = out / "pairs.jsonl", max(args.sizes())
    if not pairs_file.is_file():
        from tqdm.auto import tqdm

        from rlhf_scratch.models.loading import load_lm

        tqdm.write(f"gold pairs: {n} + {args.test_pairs} test")
        with ledger.timing("pairs"):
            rows = make_preference_pairs(load_lm("tiny").eval(), train_file.read_text().splitlines(),
                                         n + args.test_pairs, gold="tiny", label="bt", seed=args.data_seed,
                                         gen_len=args.gen_len)
            write_pairs(rows, pairs_file)
    return [json.loads(x) for x in pairs_file.read_text().splitlines()]


def proxy_command(rows: list[dict], n: int, out: Path, args: StudyArgs) -> list[str]:
    """The process of the proxy trained on the first `n` pairs (OUT/pairs-n.jsonl): a new reward-model
    run in OUT/rm-n, or `--resume` of one that has begun."""
    from rlhf_scratch.engine.runs import STATUS_FILE
    from rlhf_scratch.reward.preferences import write_pairs

    rm_dir, subset = out / f"rm-{n}", out / f"pairs-{n}.jsonl"
    if not subset.is_file():
        write_pairs(rows[:n], subset)
    cmd = [sys.executable, "-m", "rlhf_scratch.reward_model", "--quiet", "--threads", str(args.threads)]
    if (rm_dir / STATUS_FILE).is_file():
        return [*cmd, "--resume", str(rm_dir)]
    return [*cmd, "--pairs", str(subset), "--run-dir", str(rm_dir), "--epochs", str(args.rm_epochs),
            "--seed", str(args.data_seed)]


def proxy_accuracies(proxies: dict[int, Path], test_rows: list[dict], out: Path) -> dict[str, float]:
    """Each proxy's accuracy against gold on the common test pairs (cached in OUT/proxy_accuracy.json)."""
    path = out / ACCURACY_FILE
    if path.is_file():
        return json.loads(path.read_text())
    from rlhf_scratch.reward.model import gold_accuracy, load_reward_model_run, pair_texts

    chosen, rejected = pair_texts(test_rows)
    acc = {}
    for n, rm_dir in proxies.items():
        model = load_reward_model_run(rm_dir)
        acc[str(n)] = gold_accuracy(model.score_texts(chosen), model.score_texts(rejected), test_rows)
    path.write_text(json.dumps(acc, indent=1))
    return acc


def reference_samples(prompts: list[str], n: int, gen_len: int, seed: int, desc: str) -> list[tuple]:
    """n samples of each prompt from the tiny reference (temperature 1, whole vocabulary, stop at
    EOS), drawn after `torch.manual_seed(seed)`: per prompt, (prompt + completion texts, completion
    ids, completion mask). Best-of-n's pool, here and in the hacking study's (`hacking.bon`)."""
    import torch
    from tqdm.auto import tqdm

    from rlhf_scratch.models.loading import load_lm
    from rlhf_scratch.rollout.generation import decode_completions, generate, tokenize_prompts

    torch.manual_seed(seed)
    lm = load_lm("tiny").eval()
    out = []
    with torch.no_grad():
        for prompt in tqdm(prompts, desc=desc, file=sys.stderr):
            ids, mask = tokenize_prompts(lm, [prompt] * n, True)
            comp, cmask = generate(lm, ids, mask, gen_len, 1.0, 0, True)
            out.append(([prompt + c for c in decode_completions(lm, comp, cmask, True)], comp, cmask))
    return out


def best_of_n_study(proxies: dict[int, Path], eval_prompts: list[str], args: StudyArgs, seed: int) -> dict:
    """bon_max samples of each held-out prompt from the reference (drawn with `seed`); per proxy size
    and n = 1, 2, 4 … the exact expected gold and proxy of the proxy's pick, averaged over prompts."""
    from rlhf_scratch.reward.model import load_reward_model_run
    from rlhf_scratch.reward.preferences import gold_scores

    texts = [t for t, _, _ in reference_samples(eval_prompts, args.bon_max, args.gen_len, seed, "best-of-n samples")]
    flat = [t for group in texts for t in group]
    gold = gold_scores(flat).view(len(eval_prompts), args.bon_max).tolist()
    ns = [2**k for k in range(int(math.log2(args.bon_max)) + 1)]
    result = {"n": ns, "kl": [kl_bon(n) for n in ns], "d": [math.sqrt(kl_bon(n)) for n in ns], "sizes": {}}
    for size, rm_dir in proxies.items():
        proxy = load_reward_model_run(rm_dir).score_texts(flat).view(len(eval_prompts), args.bon_max).tolist()
        result["sizes"][str(size)] = {
            "gold": [sum(best_of_n_expectation(p, g, n) for p, g in zip(proxy, gold)) / len(gold) for n in ns],
            "proxy": [sum(best_of_n_expectation(p, p, n) for p in proxy) / len(proxy) for n in ns],
        }
    return result


STUDY = OverOptimizationStudy()
main = STUDY.main
"""`python -m rlhf_scratch.overoptimization --out DIR [--flag value …]`."""
study_args = STUDY.parse
"""The study's args from its command line, validated: over `QUICK` with --quick (the flags given
still win), `--seed N` read as `--seeds N`. Bad input is a ConfigError of one line."""
run_study = STUDY.run
"""Everything not done yet, then the table, the figure and the page (`--report`: no training);
the wall time of the whole call goes to times.json (study_wall_s)."""


if __name__ == "__main__":
    sys.exit(main())
