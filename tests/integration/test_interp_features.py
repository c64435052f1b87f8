"""interp.feature_diff, interp.causal and interp.sae (SAE feature diffing, explained fraction,
steering and ablation) on known answers, and the `python -m interp.features` command.

The known-answer SAE is built by hand: its decoder rows are an orthonormal basis Q of the residual
stream, its encoder is Q^T and its encoder bias is large, so every feature is active and
a(x) = x Q^T + b_enc exactly. A synthetic "tuned" model is the reference with ALPHA · Q[FEATURE]
added to block 0's MLP output bias, i.e. to the residual at blocks.0.hook_resid_post at every
position: the one right answer is "feature FEATURE went up by ALPHA, nothing else moved".
"""

import copy
import json
import sys

import pytest
import torch
from sae_lens.saes.standard_sae import StandardSAE, StandardSAEConfig  # the `sae` extra, part of `dev`

from interp import features as F
from interp.causal import ablate_features_hook, add_vector_hook, steering_vector
from interp.feature_diff import direction_logits, explained_fraction, feature_diff
from interp.sae import SAESettings, load_or_train, model_hash

SITE = "blocks.0.hook_resid_post"
FEATURE, ALPHA = 5, 0.7


@pytest.fixture
def pair(tiny_random_lm):
    """(reference, synthetic tuned, hand-built SAE, tokens)."""
    reference = tiny_random_lm.eval()
    d = reference.cfg.d_model
    Q = torch.linalg.qr(torch.randn(d, d, generator=torch.Generator().manual_seed(1)))[0].T.contiguous()  # rows orthonormal
    sae = StandardSAE(StandardSAEConfig(d_in=d, d_sae=d, apply_b_dec_to_input=False))
    with torch.no_grad():
        sae.W_dec.copy_(Q)
        sae.W_enc.copy_(Q.T)
        sae.b_enc.fill_(10.0)  # every feature active: a(x) = x Q^T + 10 (|x·q| is far below 10 here)
        sae.b_dec.zero_()
    tuned = copy.deepcopy(reference)
    with torch.no_grad():
        tuned.blocks[0].mlp.b_out += ALPHA * Q[FEATURE]
    tokens = torch.randint(0, reference.cfg.d_vocab, (3, 9), generator=torch.Generator().manual_seed(2))
    return reference, tuned, sae, tokens


def test_the_added_decoder_direction_ranks_first_with_its_exact_activation_change(pair):
    reference, tuned, sae, tokens = pair
    diff = feature_diff(reference, tuned, sae, SITE, tokens)
    assert int(diff.ranked[0]) == FEATURE
    assert diff.change[FEATURE].item() == pytest.approx(ALPHA, abs=1e-4)
    others = torch.ones_like(diff.change, dtype=torch.bool)
    others[FEATURE] = False
    assert diff.change[others].abs().max().item() < 1e-4, "only the chosen feature moved"
    assert diff.freq_ref[FEATURE].item() == diff.freq_tuned[FEATURE].item() == 1.0
    explained = explained_fraction(diff, sae.W_dec.detach(), ks=(1, 2))
    assert explained["top_1"] == pytest.approx(1.0, abs=1e-4)
    assert explained["error_change"] == pytest.approx(0.0, abs=1e-4)


def test_steering_the_reference_with_the_feature_reproduces_the_tuned_logits(pair):
    reference, tuned, sae, tokens = pair
    diff = feature_diff(reference, tuned, sae, SITE, tokens)
    top = [int(diff.ranked[0])]
    v = steering_vector(sae.W_dec.detach(), top, diff.change[top])
    steered = reference.run_with_hooks(tokens, fwd_hooks=[(SITE, add_vector_hook(v))])
    tuned_logits, ref_logits = tuned(tokens), reference(tokens)
    assert (tuned_logits - ref_logits).abs().max() > 1e-2, "the synthetic tuned model must differ"
    torch.testing.assert_close(steered, tuned_logits, atol=1e-4, rtol=1e-4)
    # the opposite sign moves the logits away from the tuned model, not onto it
    away = reference.run_with_hooks(tokens, fwd_hooks=[(SITE, add_vector_hook(-v))])
    assert (away - tuned_logits).abs().max() > 1e-2


def test_ablating_the_feature_zeroes_it_and_leaves_the_others(pair):
    reference, tuned, sae, tokens = pair
    _, cache = tuned.run_with_cache(tokens, names_filter=SITE)
    x = cache[SITE]
    ablated = ablate_features_hook(sae, [FEATURE])(x.clone(), None)
    a_before, a_after = sae.encode(x), sae.encode(ablated)
    assert a_after[..., FEATURE].abs().max().item() < 1e-4
    keep = [i for i in range(sae.cfg.d_sae) if i != FEATURE]
    torch.testing.assert_close(a_after[..., keep], a_before[..., keep], atol=1e-4, rtol=0)


def test_a_zeroed_decoder_row_reports_zero_effect(pair):
    reference, tuned, sae, tokens = pair
    with torch.no_grad():
        sae.W_dec[FEATURE] = 0.0
    diff = feature_diff(reference, tuned, sae, SITE, tokens)
    v = steering_vector(sae.W_dec.detach(), [FEATURE], diff.change[[FEATURE]])
    assert v.abs().max().item() == 0.0
    steered = reference.run_with_hooks(tokens, fwd_hooks=[(SITE, add_vector_hook(v))])
    torch.testing.assert_close(steered, reference(tokens))
    assert explained_fraction(diff, sae.W_dec.detach(), ks=(1,))["top_1"] == pytest.approx(0.0, abs=1e-6)
    assert direction_logits(tuned, sae.W_dec[FEATURE].detach(), 1.3).abs().max().item() == 0.0


def test_a_model_diffed_against_itself_reports_no_change(pair):
    reference, _, sae, tokens = pair
    diff = feature_diff(reference, reference, sae, SITE, tokens)
    assert diff.change.abs().max().item() == 0.0
    torch.testing.assert_close(diff.freq_ref, diff.freq_tuned)
    assert diff.resid_change.abs().max().item() == 0.0
    explained = explained_fraction(diff, sae.W_dec.detach())
    assert all(v != v for v in explained.values()), "no change to explain: nan, not a made-up fraction"


def test_runs_that_moved_known_features_compare_as_worked_out_by_hand(pair):
    """Across runs (interp.across_runs): run "a" moved feature 5 by +0.7 and feature 7 by +0.2, run "b"
    moved feature 5 by +0.7 and feature 2 by −0.4, run "c" is the reference itself.
    cos(a, b) = 0.7² / (√(0.7² + 0.2²) · √(0.7² + 0.4²)) = 0.49 / √(0.53 · 0.65); both top-1 sets are
    {5}; the top-2 sets {5, 7} and {5, 2} overlap 1/3; "c" changed nothing, so it has no direction."""
    from interp.across_runs import feature_changes, feature_overlap

    reference, tuned, sae, tokens = pair
    tuned_a, tuned_b = copy.deepcopy(tuned), copy.deepcopy(tuned)
    with torch.no_grad():
        tuned_a.blocks[0].mlp.b_out += 0.2 * sae.W_dec[7]
        tuned_b.blocks[0].mlp.b_out -= 0.4 * sae.W_dec[2]
    changes, alive = feature_changes(reference, {"a": tuned_a, "b": tuned_b, "c": reference}, sae, SITE, tokens)
    expected = torch.zeros(3, sae.cfg.d_sae)
    expected[0, FEATURE] = expected[1, FEATURE] = ALPHA
    expected[0, 7], expected[1, 2] = 0.2, -0.4
    torch.testing.assert_close(changes, expected, atol=1e-4, rtol=0)
    assert bool(alive.all()), "the hand-built SAE's features are always active"
    overlap = feature_overlap(["a", "b", "c"], changes, alive, ks=(1, 2))
    assert overlap.cosine[0, 1].item() == pytest.approx(0.49 / (0.53 * 0.65) ** 0.5, abs=1e-3)
    assert overlap.jaccard[1][0, 1].item() == 1.0
    assert overlap.jaccard[2][0, 1].item() == pytest.approx(1 / 3), "top-2: {5, 7} and {5, 2}"
    assert torch.isnan(overlap.cosine[2]).all() and torch.isnan(overlap.cosine[:, 2]).all()


def test_direction_logits_use_the_given_models_final_layernorm_scale(tiny_random_lm):
    model = tiny_random_lm
    d = torch.arange(model.cfg.d_model, dtype=torch.float32)
    expected = ((d - d.mean()) / 2.0 * model.ln_final.w) @ model.W_U
    torch.testing.assert_close(direction_logits(model, d, 2.0), expected)
    torch.testing.assert_close(direction_logits(model, d, 4.0), expected / 2)


def test_a_cached_sae_loads_without_reading_a_text_and_other_settings_miss(pair, tmp_path):
    """interp.sae.load_or_train: the cache key is (reference hash, site, settings). A hit loads the SAE
    and its quality and never asks for texts (which corpus is the command's business); other settings
    miss, and the first thing a miss does is ask for the train split."""
    reference, _, sae, _ = pair
    settings = SAESettings(d_sae=sae.cfg.d_sae)
    folder = tmp_path / f"{model_hash(reference)[:16]}-{SITE}-{settings.key()}"
    sae.save_model(folder)
    (folder / "quality.json").write_text(json.dumps({"explained_variance": 0.5}))

    def texts(split):
        raise LookupError(f"texts({split!r}) asked for")

    loaded, quality, where, cached = load_or_train(reference, SITE, settings, tmp_path, texts, progress=False)
    assert cached and where == folder and quality == {"explained_variance": 0.5}
    torch.testing.assert_close(loaded.W_dec, sae.W_dec)
    with pytest.raises(LookupError, match="'train'"):
        load_or_train(reference, SITE, SAESettings(d_sae=sae.cfg.d_sae, seed=1), tmp_path, texts, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == [folder.name], "a failed training leaves nothing behind"


def test_each_dictionary_architecture_builds_its_sae_lens_config_and_batchtopk_keeps_its_cache_key():
    """--dictionary names SAE Lens's own training configs; the default's cache key is the key of the
    settings before `architecture` and `l1_coefficient` existed, so SAEs cached then still load."""
    import hashlib
    from dataclasses import asdict

    from sae_lens.saes.batchtopk_sae import BatchTopKTrainingSAEConfig
    from sae_lens.saes.matryoshka_batchtopk_sae import MatryoshkaBatchTopKTrainingSAEConfig
    from sae_lens.saes.standard_sae import StandardTrainingSAEConfig

    from interp.sae import ARCHITECTURES, training_config

    kinds = {a: type(training_config(SAESettings(d_sae=64, architecture=a, l1_coefficient=2.5), 16)) for a in ARCHITECTURES}
    assert kinds == {"batchtopk": BatchTopKTrainingSAEConfig, "matryoshka_batchtopk": MatryoshkaBatchTopKTrainingSAEConfig,
                     "standard": StandardTrainingSAEConfig}
    assert training_config(SAESettings(d_sae=64, architecture="matryoshka_batchtopk"), 16).matryoshka_widths == [8, 16, 32, 64]
    assert training_config(SAESettings(architecture="standard", l1_coefficient=2.5), 16).l1_coefficient == 2.5
    before = {k: v for k, v in asdict(SAESettings()).items() if k not in ("architecture", "l1_coefficient")}
    assert SAESettings().key() == hashlib.sha256(json.dumps(before, sort_keys=True).encode()).hexdigest()[:12]
    keys = {SAESettings(architecture=a).key() for a in ARCHITECTURES} | {SAESettings(architecture="standard", l1_coefficient=3.0).key()}
    assert len(keys) == 4, "another architecture or L1 penalty is another cached SAE"


@pytest.mark.parametrize("flags, named", [(["--cc-k", "0"], "--cc-k"), (["--cc-latents", "0"], "--cc-latents"),
                                          (["--adl-texts", "-1"], "--adl-texts"), (["--l1-coefficient", "-1"], "--l1-coefficient")])
def test_bad_crosscoder_and_diff_flags_fail_in_one_line(tmp_path, capsys, flags, named):
    (tmp_path / "config.json").write_text("{}")
    assert F.main([str(tmp_path), *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and named in err


def test_missing_sae_lens_fails_in_one_line_naming_the_extra(monkeypatch, tmp_path, capsys):
    (tmp_path / "config.json").write_text("{}")
    monkeypatch.setitem(sys.modules, "sae_lens", None)  # import sae_lens -> ImportError
    assert F.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "[sae]" in err and "SAE Lens" in err


@pytest.mark.slow
def test_features_command_end_to_end_on_a_tiny_run(tuned_ppo_run, tmp_path, capsys, one_thread):
    cache = tmp_path / "saes"
    small = ["--layer", "1", "--d-sae", "64", "--k", "4", "--training-tokens", "4096", "--eval-batches", "1",
             "--n-samples", "4", "--n-diff", "4", "--n-snippets", "16", "--top-n", "3", "--cache-dir", str(cache),
             "--out", str(tmp_path / "interp")]
    crosscoder = ["--crosscoder", "--cc-latents", "32", "--cc-k", "4", "--cc-tokens", "4096", "--cc-positions", "2048",
                  "--adl-texts", "8", "--adl-k", "3"]
    assert F.main([str(tuned_ppo_run), *small, *crosscoder]) == 0
    err = capsys.readouterr().err
    assert "trained and cached" in err
    page = (tmp_path / "interp" / "features.html").read_text()
    assert "explained_variance" in page and "Steering the reference" in page and "report.html" in page
    summary = json.loads((tmp_path / "interp" / "features" / "features.json").read_text())
    assert summary["site"] == "blocks.1.hook_resid_post"
    assert len(summary["top_features"]) == 3
    assert set(summary["explained"]) == {"top_1", "top_10", "top_100", "all_features", "error_change"}
    assert {"ce_loss_increase", "l0", "dead_features", "explained_variance"} <= set(summary["sae"])
    assert summary["dead_fraction"] == summary["sae"]["dead_fraction"]
    assert summary["explained_change"] == summary["explained"]["all_features"]
    assert {"explained_variance", "dead_fraction"} <= set(summary["sae_on_tuned"]), "the SAE judged on the tuned model too"
    cc = summary["crosscoder"]
    assert sum(cc["counts"].values()) == 32 and len(cc["per_latent"]["nu_error"]) == 32
    assert set(cc["top"]) == {"tuned-only", "reference-only", "shared"}
    assert summary["adl"]["k"] == 3 and len(summary["adl"]["logit_lens"]["promoted"]) == 10
    assert set(summary["adl"]["dictionaries"]) == {"SAE", "crosscoder d^tuned − d^ref"}
    assert summary["weights"]["n_matrices_moved"] > 0 and summary["weights"]["top"][0]["relative_update"] > 0
    assert "Crosscoder: shared" in page and "Activation Difference Lens" in page and "Weights: how much" in page
    assert summary["sae"]["settings"]["architecture"] == "batchtopk" and cc["settings"]["d_latent"] == 32, \
        "features.json records the dictionary and the crosscoder it was made with"
    heads = summary["heads"]
    value = heads["heads"][0]
    assert [h["name"] for h in heads["heads"]] == ["value head"] and value["method"].startswith("mean gradient over ")
    assert value["other_sites"] == {"SAE": "blocks.1.hook_resid_post", "crosscoder d^tuned": "blocks.1.hook_resid_post"}
    assert len(value["logit_lens"]["promoted"]) == 10 and "reads text, not this model's residual" in heads["notes"][0]
    assert "which directions they read" in page
    c = summary["causal"]
    assert c["reference"]["kl"] == pytest.approx(0.0, abs=1e-4), "the reference's KL to itself is 0"
    assert len(c["steered_random"]) == 3
    # the second time the SAE comes from the cache (same reference, site and settings)
    assert F.main([str(tuned_ppo_run), *small, "--no-reward"]) == 0
    assert "loaded from" in capsys.readouterr().err
    assert len(list(cache.iterdir())) == 1
    # a bad layer: one line
    assert F.main([str(tuned_ppo_run), *small, "--layer", "9"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--layer" in err
