"""Finding the hack (studies/hacking/find.py, find_steps.py, excess.py, describe.py, find_page.py): each formula against numbers
worked out by hand, the describer on hand-made texts, the verdict over seeds, and the bad flags."""

import math
import random

import pytest
import torch

from rlhf_scratch.studies.hacking.describe import (
    Texts,
    char_share,
    correlation_p,
    describe,
    description,
    distinct_token_ratio,
    pearson,
    per_sample_ngram_fraction,
    top_token_share,
)
from rlhf_scratch.studies.hacking.excess import explained_share, standardised_gold
from rlhf_scratch.studies.hacking.find import main
from rlhf_scratch.studies.hacking.find_page import summarise
from rlhf_scratch.studies.hacking.find_steps import ablation_hooks, token_shares
from rlhf_scratch.studies.stats import t_sf


def test_gold_is_put_on_the_proxys_scale_with_the_references_moments():
    # reference: gold [0, 2] (mean 1, population sd 1), proxy [1, 5] (mean 3, sd 2): ĝ = 3 + (g − 1) · 2
    gold_ref, proxy_ref = torch.tensor([0.0, 2.0]), torch.tensor([1.0, 5.0])
    g = standardised_gold(torch.tensor([4.0, -1.0]), gold_ref, proxy_ref)
    assert g.tolist() == pytest.approx([9.0, -1.0])
    swapped = standardised_gold(torch.tensor([4.0]), proxy_ref, gold_ref)  # proxy's moments used for gold: 1 + (4 − 3)/2
    assert swapped.item() == pytest.approx(1.5) and g[0].item() != pytest.approx(1.5)
    assert standardised_gold(gold_ref, gold_ref, proxy_ref).mean().item() == pytest.approx(proxy_ref.mean().item()), \
        "on the reference's own samples the excess averages 0"


def test_explained_share_by_hand():
    # reference: a [0, 2], e [1, −1]; policy: a [4, 8], e [3, 5]. ā₀ 1, ē₀ 0, ā₁ 6, ē₁ 4.
    # within: Σ(a−ā_g)(e−ē_g) = (−1)(1) + (1)(−1) + (−2)(−1) + (2)(1) = 2; Σ(a−ā_g)² = 1+1+4+4 = 10; Σ(e−ē_g)² = 1+1+1+1 = 4
    # β_w = 0.2, share = 0.2 · (6 − 1) / (4 − 0) = 0.25, r²_w = 2² / (10 · 4) = 0.1
    e = torch.tensor([1.0, -1.0, 3.0, 5.0])
    a = torch.tensor([[0.0], [2.0], [4.0], [8.0]])
    group = torch.tensor([False, False, True, True])
    out = explained_share(e, a, group)
    assert out["slope"].item() == pytest.approx(0.2)
    assert out["share"].item() == pytest.approx(0.25)
    assert out["r2_within"].item() == pytest.approx(0.1)
    assert out["gap_activation"].item() == pytest.approx(5.0) and out["gap_excess"].item() == pytest.approx(4.0)
    # the slope fitted across the groups instead: ā 3.5, ē 2, Σ(a−ā)(e−ē) = 3.5 + 4.5 + 0.5 + 13.5 = 22, Σ(a−ā)² = 35
    pooled = torch.cov(torch.stack([a[:, 0], e]))[0, 1] / a[:, 0].var()
    assert pooled.item() == pytest.approx(22 / 35) and out["slope"].item() != pytest.approx(22 / 35)


def test_a_feature_that_only_separates_the_groups_explains_nothing():
    e = torch.tensor([1.0, -1.0, 3.0, 5.0])
    a = torch.tensor([[0.0, 1.0], [0.0, 3.0], [1.0, 2.0], [1.0, 4.0]])  # column 0: the group; column 1: tracks e within
    out = explained_share(e, a, torch.tensor([False, False, True, True]))
    assert out["share"][0].item() == 0.0 and out["slope"][0].item() == 0.0
    # column 1: within cov (−1)(1) + (1)(−1) + (−1)(−1) + (1)(1) = 0 -> also 0; shift it to make it track e
    a[:, 1] = torch.tensor([3.0, 1.0, 2.0, 4.0])  # within: (1)(1)+(−1)(−1)+(−1)(−1)+(1)(1) = 4, Σa² = 4 -> β 1
    out = explained_share(e, a, torch.tensor([False, False, True, True]))
    assert out["slope"][1].item() == pytest.approx(1.0) and out["share"][1].item() == pytest.approx(1.0 * (3 - 2) / 4)


def test_surface_statistics_by_hand():
    assert top_token_share([5, 5, 7, 9]) == 0.5 and top_token_share([]) == 0.0
    assert distinct_token_ratio([5, 5, 7, 9]) == 0.75
    assert char_share("a, b!", "!,.") == pytest.approx(2 / 4)  # 4 non-space characters, two of them punctuation
    assert char_share("ab 12 3", None) == pytest.approx(3 / 5)
    ids = torch.tensor([[1, 2, 3, 1, 2, 3], [1, 2, 3, 4, 5, 6]])
    mask = torch.tensor([[True] * 6, [True] * 5 + [False]])
    # row 0: 3-grams 123 231 312 123 -> one repeat of 4 = 0.25; row 1 (5 kept): 123 234 345 -> 0
    assert per_sample_ngram_fraction(ids, mask, 3) == [0.25, 0.0]


def test_pearson_and_its_p_by_hand():
    # x − x̄ = −1, 0, 1; y = 2, 4, 7, ȳ = 13/3: −7/3, −1/3, 8/3; Σxy = 5, Σx² = 2, Σy² = 114/9
    assert pearson([1, 2, 3], [2, 4, 7]) == pytest.approx(5 / math.sqrt(2 * 114 / 9))
    assert pearson([1, 2, 3], [4, 4, 4]) == 0.0
    # r = 0.6, n = 11: t = 0.6 · √9 / √0.64 = 2.25 on 9 degrees of freedom
    assert correlation_p(0.6, 11) == pytest.approx(2 * t_sf(2.25, 9))
    assert correlation_p(0.0, 11) == 1.0 and correlation_p(1.0, 11) == 0.0


def _texts(n: int = 60, seed: int = 0) -> Texts:
    """n completions of 12 tokens: some repeat a short loop, some do not, lengths vary independently."""
    rng = random.Random(seed)
    rows, words = [], []
    for _ in range(n):
        loop = rng.choice([2, 3, 12])  # a 2- or 3-token loop repeats; 12: no repetition
        base = [rng.randrange(10, 60) for _ in range(loop)]
        ids = [base[j % loop] + (0 if loop < 12 else j * 60) for j in range(12)]
        keep = 12 - rng.randrange(0, 4)
        rows.append((ids, [j < keep for j in range(12)]))
        words.append(" ".join(f"w{t}" for t in ids[:keep]))
    ids = torch.tensor([r[0] for r in rows])
    mask = torch.tensor([r[1] for r in rows])
    return Texts(words, ids, mask)


def test_the_describer_names_repetition_for_a_feature_that_tracks_it_and_nothing_for_a_shuffled_one():
    texts = _texts()
    rep3 = per_sample_ngram_fraction(texts.ids, texts.mask, 3)
    feature = [r + 0.05 * math.sin(i) for i, r in enumerate(rep3)]
    found = describe(feature, texts)
    assert found["best"]["theme"] == "repetition", found["table"][:3]
    assert "repetition" in description(found)
    shuffled = feature[:]
    random.Random(1).shuffle(shuffled)
    assert describe(shuffled, texts)["best"] is None, "a feature that tracks nothing is described as nothing"
    length = texts.mask.sum(1).float().tolist()
    assert describe([x + 0.01 * i for i, x in enumerate(length)], texts)["best"]["theme"] == "length"


def test_token_shares_count_kept_tokens_only():
    t = Texts(["", ""], torch.tensor([[7, 7, 3, 7], [3, 3, 3, 3]]), torch.tensor([[True, True, True, False], [True] * 4]))
    # row 0: kept 7 7 3 -> 7: 2/3, 3: 1/3; row 1: 7: 0, 3: 1
    assert token_shares([t], [7, 3]).tolist() == [[pytest.approx(2 / 3), pytest.approx(1 / 3)], [0.0, 1.0]]


def test_ablation_hooks_set_a_neuron_and_steer_against_a_direction():
    means = {"neuron": torch.tensor([[0.0, 0.0, 0.0], [0.0, 0.0, 2.5]]), "gap": torch.tensor([0.0, 3.0])}
    (name, hook), = ablation_hooks("neuron", (1, 2), means)
    x = torch.ones(1, 2, 3)
    assert name == "blocks.1.mlp.hook_post" and hook(x, None)[..., 2].tolist() == [[2.5, 2.5]]
    assert x[..., 2].tolist() == [[1.0, 1.0]], "the cached activation is not changed in place"
    (name, hook), = ablation_hooks("direction", (1, 0), means, torch.tensor([0.0, 1.0]))
    # x − |Δ_1| u = [1, 2] − 3 · [0, 1] = [1, −1]
    assert name == "blocks.1.hook_resid_post" and hook(torch.tensor([[1.0, 2.0]]), None).tolist() == [[1.0, -1.0]]


def _run(theme: str, excess: float, reduction: float, random_reduction: float) -> dict:
    best = {"name": f"{theme} stat", "theme": theme, "r": 0.9, "p": 1e-9}
    check = {"before": {"excess": excess}, "reduction": reduction, "random_reduction": random_reduction}
    return {"policy": {"excess": excess}, "finding": {"description": {"best": best}}, "causal": check}


def test_summarise_counts_the_repetition_findings_and_pairs_the_causal_check_by_run():
    per_run = {"a": _run("repetition", 2.0, 0.5, 0.1), "b": _run("repetition", 1.0, 0.3, 0.2),
               "c": _run("length", 1.5, 0.4, 0.0)}
    s = summarise(per_run)
    assert s["repetition_runs"] == 2 and s["themes"] == ["repetition", "repetition", "length"]
    # differences 0.4, 0.1, 0.4: mean 0.3; shares removed 0.25, 0.3, 0.2667
    assert s["causal"]["paired"]["mean"] == pytest.approx(0.3) and s["causal"]["paired"]["n"] == 3
    assert s["causal"]["share_removed"]["mean"] == pytest.approx((0.25 + 0.3 + 0.4 / 1.5) / 3)
    assert s["verdict"].startswith("Interpretability, not told the flaw: on 2 of 3 runs")
    assert "causal_top" not in s


@pytest.mark.parametrize("argv, message", [
    ([], "error: runs: give at least one run folder"),
    (["--runs", "nowhere"], "error: runs: nowhere is not a run folder"),
])
def test_bad_flags_are_one_line_and_exit_2(argv, message, tmp_path, capsys):
    prompts = tmp_path / "p.txt"
    prompts.write_text("This movie\n")
    assert main([*argv, "--proxy", str(tmp_path), "--prompts", str(prompts), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(message) and "\n" not in err
