"""Stopping the hack (issue 46, item 5): early stopping on a held-out signal, gold read at a
matched distance, the ensemble's members, and the comparison table of mitigations.

    python -m rlhf_scratch.studies.hacking.mitigate --baseline benchmarks/hacking_decided_2026-11-27.json,benchmarks/hacking_confirm_2026-11-27.json \\
        --proxies .hack45 --out benchmarks/hacking_mitigations_2026-11-27.json --overwrite [--methods OUT_b005,OUT_b02,OUT_min]

**Early stopping** (`early_stop_index`): what a practitioner has without gold is the proxy on
held-out prompts at each evaluation, r_0 … r_T, and its standard error s. The rule keeps the
checkpoint of the first evaluation i after which the proxy has not risen by more than s for m
evaluations:

    i* = min { i : i + m ≤ T and max(r_{i+1} … r_{i+m}) ≤ r_i + s }      (else i* = T, the last)

decided at evaluation i* + m (the run may stop there and restore i*'s checkpoint). s is the proxy's
prompts-held-fixed standard error measured on the reference (`reference_proxy_se`), a number that
needs no gold; m (`--patience`) is fixed before gold is read. Its result, per seed: gold at i*
against gold at the run's end and at gold's own peak, paired over seeds (`stats.paired_difference`).

**Gold at a matched distance** (`gold_at_d`): methods move the policy different distances (a KL
penalty holds it near the reference), so gold is also read where each run first reaches the same
d = √KL, linearly between the two evaluations around it:

    g(d) = g_a + (g_b − g_a) · (d − d_a) / (d_b − d_a),   a, b the first consecutive evaluations with d_a ≤ d ≤ d_b

None when the run never reaches d. The common d* (`farthest_common_d`) is the farthest every run of
every method compared reached: min over runs of max_t d_t.

**The table** (`comparison`): per mitigation, its n seeds, gold at the final point and at d*
(95 % t intervals), the proxy and d at the final point, and the verdict against no mitigation on
the final gold: paired when the seeds are the same, else Welch (`stats.difference`); "keeps more
gold, decided" when the interval is above 0, "keeps less gold, decided" below, else "not resolved
at n". A length-normalised reward only mitigates a length flaw: for the repetition flaw its row says
n/a. A method whose study has not been run says "to be measured".
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import tyro

from rlhf_scratch.config import ConfigError

Curve = Sequence[Mapping]
"""One run's evaluated points, in order: {"phase", "d", "gold", "proxy", …} (`pilot.curve`)."""
PATIENCE = 3
"""m of the primary rule: three evaluations (9 phases at --eval-every 3) without a rise, fixed before gold was read."""
ENSEMBLE_K = 3


def early_stop_index(proxy: Sequence[float], se: float, patience: int = PATIENCE) -> int:
    """i*: the first i with max(r_{i+1} … r_{i+m}) ≤ r_i + s and i + m ≤ T; T (the last index) when
    no evaluation qualifies (module docstring)."""
    if patience < 1 or se < 0 or not proxy:
        raise ValueError(f"early_stop_index: need patience >= 1, se >= 0 and a curve; got {patience}, {se}, {len(proxy)}")
    last = len(proxy) - 1
    for i in range(last - patience + 1):
        if max(proxy[i + 1 : i + 1 + patience]) <= proxy[i] + se:
            return i
    return last


def gold_at_d(curve: Curve, d: float, key: str = "gold") -> float | None:
    """`key` where the run first reaches distance d, linear in d between the evaluations around it
    (module docstring); None when it never does."""
    if curve and curve[0]["d"] == d:
        return curve[0][key]
    for a, b in zip(curve, curve[1:]):
        if a["d"] <= d <= b["d"] and b["d"] > a["d"]:
            return a[key] + (b[key] - a[key]) * (d - a["d"]) / (b["d"] - a["d"])
    return None


def farthest_common_d(runs: Sequence[Curve]) -> float:
    """d*: the farthest distance every run reached, min over runs of max_t d_t."""
    if not runs:
        raise ValueError("farthest_common_d: no runs")
    return min(max(p["d"] for p in c) for c in runs)


def early_stopping(by_seed: Mapping[int, Curve], se: float, patience: int = PATIENCE) -> dict:
    """The rule on each seed's curve: per seed the kept and deciding phases and gold there, and over
    the seeds gold(stop) − gold(final), gold's own peak − gold(stop) and the other seeds' peak − gold(stop)."""
    from rlhf_scratch.studies.hacking.pilot import held_out_peaks, interval
    from rlhf_scratch.studies.stats import paired_difference

    seeds = sorted(by_seed)
    per_seed = {}
    for s in seeds:
        c = by_seed[s]
        i = early_stop_index([p["proxy"] for p in c], se, patience)
        per_seed[s] = {"stop_phase": c[i]["phase"], "decided_at_phase": c[min(i + patience, len(c) - 1)]["phase"]
                       if i < len(c) - 1 else c[-1]["phase"], "stopped": i < len(c) - 1,
                       "gold_stop": c[i]["gold"], "gold_final": c[-1]["gold"], "gold_peak": max(p["gold"] for p in c),
                       "proxy_stop": c[i]["proxy"], "d_stop": c[i]["d"], "rep3_stop": c[i].get("repeated_3grams")}
    stop = [per_seed[s]["gold_stop"] for s in seeds]
    held = held_out_peaks(by_seed) if len(seeds) > 1 else {}
    result = {"patience": patience, "se": se, "n": len(seeds),
              "stopped_seeds": sum(v["stopped"] for v in per_seed.values()),
              "stop_minus_final": interval(paired_difference(stop, [per_seed[s]["gold_final"] for s in seeds])),
              "peak_minus_stop": interval(paired_difference([per_seed[s]["gold_peak"] for s in seeds], stop)),
              "per_seed": {str(s): v for s, v in per_seed.items()}}
    if held:
        result["held_out_peak_minus_stop"] = interval(paired_difference([held[s] for s in seeds], stop))
    return result


def stopped_curves(by_seed: Mapping[int, Curve], se: float, patience: int = PATIENCE) -> dict[int, list]:
    """Each seed's curve up to and including its kept evaluation i*: the early-stopped runs."""
    return {s: list(c[: early_stop_index([p["proxy"] for p in c], se, patience) + 1]) for s, c in by_seed.items()}


# --- the comparison table ----------------------------------------------------------------------

HEADER = ["mitigation", "n seeds", "gold at final (95 %)", "gold at matched d* (95 %)", "proxy at final (95 %)",
          "d = √KL at final (95 %)", "verdict vs no mitigation (gold at final)"]
BASELINE = "none (PPO, β = 0)"
NOTE = ("Gold g′ = g − 4·rep₃ and the proxy on the 64 held-out prompts × 8 samples; the proxy is each run's own "
        "reward (for the ensemble its reduction of the k members, not the single proxy); d* is the farthest d = √KL "
        "every run of every method reached; mean ± 95 % t half-width over seeds; verdicts paired when the seeds are "
        "the same, else Welch.")
LENGTH_ROW = "length-normalised reward"


def verdict(diff, n_text: str) -> str:
    """The verdict cell of a Difference (method − baseline)."""
    if not math.isfinite(diff.half_width):
        return f"not resolved at {n_text} (one seed)"
    span = f"{diff.mean:+.3f} ({diff.low:+.3f} to {diff.high:+.3f}, {'paired' if diff.paired else 'Welch'})"
    if diff.low > 0:
        return f"keeps more gold, decided: {span}"
    if diff.high < 0:
        return f"keeps less gold, decided: {span}"
    return f"not resolved at {n_text}: {span}"


def comparison(methods: Mapping[str, Mapping[int, Curve] | None], baseline: str = BASELINE,
               notes: Mapping[str, str] | None = None, cut: Sequence[str] = ()) -> dict:
    """Rows of the table (module docstring): `methods` name -> {seed: curve}, the baseline among them;
    None: not run yet ("to be measured", or `notes`' text for the row). Rows named in `cut` are other
    rows' curves cut short (early stopping): they do not set d*."""
    from rlhf_scratch.studies.stats import difference, mean_interval

    notes = notes or {}
    ran = {m: c for m, c in methods.items() if c}
    common = farthest_common_d([c for m, by in ran.items() if m not in cut for c in by.values()])
    base = ran[baseline]
    base_final = {s: c[-1]["gold"] for s, c in base.items()}
    rows, data = [], {"d_star": common, "by_method": {}}
    for name, by_seed in methods.items():
        if not by_seed:
            why = notes.get(name, "to be measured")
            rows.append([name, "—", why, why, why, why, why])
            data["by_method"][name] = {"status": why}
            continue
        seeds = sorted(by_seed)
        final = {s: by_seed[s][-1]["gold"] for s in seeds}
        at_d = [gold_at_d(by_seed[s], common) for s in seeds]
        cells = {k: mean_interval([by_seed[s][-1][k] for s in seeds]) for k in ("gold", "proxy", "d")}
        matched = mean_interval(at_d) if None not in at_d else None
        n_text = f"n = {len(seeds)}" if set(seeds) == set(base) else f"n = {len(seeds)} vs {len(base)}"
        diff = difference(final, base_final) if name != baseline else None
        at_d_cell = ("n/a: the baseline's runs, cut at the stop" if name in cut else
                     matched.cell() if matched else "not reached by every seed")
        rows.append([name, str(len(seeds)), cells["gold"].cell(), at_d_cell,
                     cells["proxy"].cell(), cells["d"].cell(), "—" if diff is None else verdict(diff, n_text)])
        data["by_method"][name] = {"seeds": seeds, **{f"{k}_final": v.as_json() for k, v in cells.items()},
                              "gold_at_d_star": matched.as_json() if matched else None,
                              "vs_baseline": None if diff is None else
                              {"mean": diff.mean, "low": diff.low, "high": diff.high, "paired": diff.paired, "p": diff.p},
                              "verdict": rows[-1][-1]}
    return {"header": HEADER, "rows": rows, "note": NOTE, **data}


# --- the ensemble's members ----------------------------------------------------------------------


def member_dirs(data: Path, rater: str, k: int = ENSEMBLE_K) -> list[Path]:
    """The k proxies of a rater's ensemble: its proxy rm-<rater> (reward-model seed s₀) and
    rm-<rater>-seed<s₀+1> … : the same pairs, other training seeds (the head's initialisation, the
    pairs' order and the held-out split), as Coste et al. trained theirs."""
    base = data / f"rm-{rater}"
    s0 = json.loads((base / "config.json").read_text()).get("seed", 1) if (base / "config.json").is_file() else 1
    return [base] + [data / f"rm-{rater}-seed{s0 + j}" for j in range(1, k)]


def make_members(data: Path, rater: str, k: int, epochs: int, threads: int) -> list[Path]:
    """`member_dirs`, the missing ones trained now (`python -m rlhf_scratch.reward_model`, niced,
    about 35 s each on one core), their checkpoints removed (a carried folder must stay small)."""
    import shutil

    from rlhf_scratch.studies.hacking.pilot import step

    members = member_dirs(data, rater, k)
    seed0 = json.loads((members[0] / "config.json").read_text()).get("seed", 1)
    for j, m in enumerate(members[1:], start=1):
        if not (m / "reward_model.pt").is_file():
            step([sys.executable, "-m", "rlhf_scratch.reward_model", "--quiet", "--threads", str(threads), "--pairs",
                  str(data / f"pairs-{rater}-train.jsonl"), "--run-dir", str(m), "--epochs", str(epochs),
                  "--seed", str(seed0 + j)], m.name)
            shutil.rmtree(m / "checkpoints", ignore_errors=True)
    return members


def ensemble_spec(reduction: str, members: Sequence[Path]) -> str:
    """`--reward-model` of an ensemble: `min:/abs/a,/abs/b,…` (`reward.ensemble.parse_ensemble`)."""
    return f"{reduction}:{','.join(str(Path(m).resolve()) for m in members)}"


def ensemble_proxies(args, proxies: Mapping[str, Path]) -> dict[str, str]:
    """The hacking study's --mitigation ensemble-R: each rater's proxy replaced by the `--reward-model`
    of its k members (`make_members`, in the proxies' folder) reduced by R."""
    data = args.data_dir()
    reduction = args.mitigation.removeprefix("ensemble-")
    return {r: ensemble_spec(reduction, make_members(data, r, args.ensemble_k, args.rm_epochs, args.threads))
            for r in proxies}


# --- reading curves back and the command ---------------------------------------------------------


def load_curves(source: str | Path, algo: str = "ppo", rater: str = "repetition") -> dict[int, list]:
    """{seed: curve} from a benchmark JSON (its "curves": {label: {seed: curve}}) or a hacking study's
    folder (OUT/table.json's "curves": {algo: {rater: {seed: curve}}})."""
    path = Path(source)
    file = path / "table.json" if path.is_dir() else path
    if path.is_dir() and not file.is_file() and (path / "study.json").is_file():
        return finished_runs(path, algo, rater)
    if not file.is_file():
        raise ConfigError(f"baseline: {source} is neither a hacking study folder with table.json nor a JSON file")
    curves = json.loads(file.read_text()).get("curves", {})
    by = curves.get(algo) or curves.get(algo.upper()) or {}
    by = by.get(rater, by)
    if not by:
        raise ConfigError(f"baseline: {source} holds no {algo} curves")
    return {int(s): c for s, c in by.items()}


def finished_runs(folder: Path, algo: str = "ppo", rater: str = "repetition") -> dict[int, list]:
    """{seed: curve} of a hacking study's finished runs, read from OUT/runs/ (`pilot.curve`): for a
    study stopped before its report (a time limit); its unfinished runs are left out, so n says so."""
    from rlhf_scratch.engine.runs import read_status
    from rlhf_scratch.studies.hacking.pilot import curve

    penalty = json.loads((folder / "study.json").read_text()).get("rater_penalty", 4.0)
    found = {}
    for run in sorted((folder / "runs").glob(f"{algo}-s*-{rater}*")):
        if (run / "status.json").is_file() and read_status(run)["status"] == "finished":
            found[int(run.name.split("-")[1].removeprefix("s"))] = curve(run, rater, penalty)
    if not found:
        raise ConfigError(f"baseline: {folder} holds no finished {algo} run against the {rater} proxy")
    return found


def method_name(folder: str | Path) -> str:
    """A study folder's row name, from its study.json: its mitigation, else its β."""
    plan = json.loads((Path(folder) / "study.json").read_text())
    mitigation = plan.get("mitigation", "none")
    if mitigation.startswith("ensemble-"):
        return f"reward-model ensemble, k = {plan.get('ensemble_k', ENSEMBLE_K)}, {mitigation.removeprefix('ensemble-')}"
    if plan.get("beta"):
        return f"KL penalty β = {plan['beta']:g}"
    return f"{BASELINE}, {Path(folder).name}"  # another unmitigated study: its own row, never the baseline's


def member_accuracy(data: Path, rater: str = "repetition") -> dict:
    """Each existing ensemble member's accuracy against gold on the proxy's test pairs (the pairs after
    the first --rm-pairs), with Wilson's interval (`pilot.proxy_accuracy`)."""
    from rlhf_scratch.studies.hacking.pilot import HackSettings, proxy_accuracy

    pairs = data / f"pairs-{rater}.jsonl"
    if not pairs.is_file():
        return {}
    rows = [json.loads(x) for x in pairs.read_text().splitlines()][HackSettings().rm_pairs :]
    return {m.name: proxy_accuracy(m, rows) for m in member_dirs(data, rater) if (m / "reward_model.pt").is_file()}


def reference_proxy_se(data: Path, proxy: Path, seeds: Sequence[int] = (1, 2, 3), per_prompt: int = 8,
                       gen_len: int = 16) -> dict:
    """The proxy's prompts-held-fixed standard error on the reference's samples of the held-out
    prompts (data/eval.txt), one evaluation per sampling seed, and their mean: the rule's s."""
    import torch

    from rlhf_scratch.models.loading import load_lm
    from rlhf_scratch.reward.functions import SentimentReward
    from rlhf_scratch.studies.overoptimization.formulas import gold_standard_error
    from rlhf_scratch.studies.overoptimization.run import evaluate_policy

    prompts = (data / "eval.txt").read_text().splitlines()
    ref, reward = load_lm("tiny", "cpu").eval(), SentimentReward(str(proxy))
    each = {}
    for seed in seeds:
        torch.manual_seed(seed)
        _, samples = evaluate_policy(ref, ref, prompts, reward, gen_len, per_prompt)
        each[str(seed)] = gold_standard_error([x["proxy"] for x in samples], per_prompt)
    return {"se": sum(each.values()) / len(each), "per_sampling_seed": each, "prompts": len(prompts),
            "per_prompt": per_prompt}


@dataclass
class MitigateArgs:
    """Early stopping on the recorded PPO curves and the table of mitigations against the repetition-blind proxy."""

    out: str = tyro.MISSING
    """The JSON to write (the markdown table beside it, .md); refused if either exists, unless --overwrite."""
    overwrite: bool = False
    """Replace an existing --out and its .md (the committed benchmark's, when it is measured again)."""
    baseline: str = "benchmarks/hacking_decided_2026-11-27.json,benchmarks/hacking_confirm_2026-11-27.json"
    """Comma-separated sources of the unmitigated PPO runs (benchmark JSONs or hacking study folders)."""
    methods: str = ""
    """Comma-separated hacking study folders of mitigated runs (--beta B, or --mitigation ensemble-min)."""
    proxies: str = ""
    """The folder of the proxy (rm-repetition/) and held-out prompts (eval.txt) the runs used, a pilot's or
    a hacking study's OUT: for the proxy's standard error and the ensemble members' accuracy. Needed
    unless --proxy-se is given."""
    proxy_se: float = 0.0
    """The rule's s; 0: measured on the reference (`reference_proxy_se`, three sampling seeds)."""
    patience: int = PATIENCE
    """m of the rule (evaluations without a rise); 2 and 4 are reported beside it, as sensitivity."""

    def validate(self) -> MitigateArgs:
        if self.patience < 1:
            raise ConfigError(f"patience: must be >= 1; got {self.patience}")
        if self.proxy_se < 0:
            raise ConfigError(f"proxy_se: must be >= 0 (0: measure it); got {self.proxy_se}")
        if not (math.isfinite(self.proxy_se) and self.proxy_se >= 0):
            raise ConfigError(f"proxy_se: must be finite and >= 0 (0: measure it); got {self.proxy_se}")
        if not self.proxy_se:
            if not self.proxies:
                raise ConfigError("proxies: required to measure the proxy's standard error (the folder of the runs' "
                                  "proxy and held-out prompts, a pilot's or a hacking study's OUT), or give --proxy-se")
            for need in ("eval.txt", "rm-repetition/reward_model.pt"):
                if not (Path(self.proxies) / need).is_file():
                    raise ConfigError(f"proxies: {self.proxies} holds no {need} (needed to measure the proxy's "
                                      "standard error; or give --proxy-se)")
        for folder in filter(None, self.methods.split(",")):
            if not (Path(folder) / "study.json").is_file():
                raise ConfigError(f"methods: {folder} is not a hacking study folder (no study.json)")
        out = Path(self.out)
        if out.suffix != ".json":
            raise ConfigError(f"out: {out} must end in .json (the table is written beside it, .md)")
        if not out.parent.is_dir():
            raise ConfigError(f"out: {out.parent} is no folder")
        if not self.overwrite:
            for path in (out, out.with_suffix(".md")):
                if path.exists():
                    raise ConfigError(f"out: {path} exists; choose a new --out, or give --overwrite to replace it "
                                      "(nothing was written)")
        return self


PLANNED = ("KL penalty β = 0.05", "KL penalty β = 0.2", f"reward-model ensemble, k = {ENSEMBLE_K}, min")
"""The rows prepared for the lead's run (docs/hacking-detectors.md, "Stopping it"): "to be measured" until run."""


def run(args: MitigateArgs) -> int:
    baseline: dict[int, list] = {}
    for source in filter(None, args.baseline.split(",")):
        baseline.update(load_curves(source))
    se = ({"se": args.proxy_se, "given": True} if args.proxy_se
          else reference_proxy_se(Path(args.proxies), Path(args.proxies) / "rm-repetition"))
    stopping = {m: early_stopping(baseline, se["se"], m) for m in sorted({2, args.patience, 4})}
    stop_name = f"early stopping (held-out proxy, m = {args.patience})"
    methods: dict[str, dict | None] = {BASELINE: baseline, stop_name: stopped_curves(baseline, se["se"], args.patience)}
    methods.update({name: None for name in PLANNED})
    for folder in filter(None, args.methods.split(",")):
        methods[method_name(folder)] = load_curves(folder)
    methods[LENGTH_ROW] = None
    table = comparison(methods, notes={LENGTH_ROW: "n/a for the repetition flaw"}, cut=(stop_name,))
    from rlhf_scratch.studies.runner import markdown_table

    markdown = markdown_table(table["header"], table["rows"]) + f"\n\n{NOTE} Here d* = {table['d_star']:.2f}."
    p = stopping[args.patience]
    result = {"issue": 46, "item": 5, "rule": early_stop_index.__doc__, "patience": args.patience,
              "fixed_before_gold": "m = 3 and s (the proxy's standard error on the reference) were chosen before this "
                                   "rule read any seed's gold; m = 2 and 4 are reported beside it as sensitivity",
              "ensemble_members": member_accuracy(Path(args.proxies)),
              "baseline_sources": args.baseline.split(","), "proxy_se": se, "early_stopping": p,
              "sensitivity": {str(m): {k: v for k, v in r.items() if k != "per_seed"} for m, r in stopping.items()},
              "comparison": table, "markdown": markdown}
    out = Path(args.out)
    out.write_text(json.dumps(result, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown + "\n")
    f = lambda d: f"{d['mean']:+.3f} ({d['low']:+.3f} to {d['high']:+.3f})"  # noqa: E731
    print(f"early stopping, m = {args.patience}, s = {se['se']:.4f}, n = {p['n']} seeds ({p['stopped_seeds']} stopped "
          f"before the end): gold(stop) - gold(final) {f(p['stop_minus_final'])}; gold's peak - gold(stop) "
          f"{f(p['peak_minus_stop'])}\n\n{markdown}\n\nwrote {out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    from rlhf_scratch.config.cli import parse_dataclass
    from rlhf_scratch.config.command import command

    prog = "python -m rlhf_scratch.studies.hacking.mitigate"
    return command(lambda a: parse_dataclass(MitigateArgs, a, default=None, prog=prog,
                                             description=MitigateArgs.__doc__).validate(), run, argv)


if __name__ == "__main__":
    sys.exit(main())
