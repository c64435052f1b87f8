"""interp on every model family: the identities each analysis relies on, checked on GPT-2, Pythia
(parallel blocks), Llama and Qwen2 (RMSNorm, grouped-query attention, gated MLP) and Gemma (one K/V
head, gated GELU, √d embedding scale), loaded from random-init folders as `--model FOLDER` loads them.

Each model's weight matrices are scaled up 8x (a random init's std 0.02 gives logit differences
of ~0.01 nats, too small for a 1e-4 check to mean anything; 8x gives ~1 nat, neurons included),
and it gets non-zero b_O, b_out and b_U (they belong to no head or neuron: a sum that forgets one
is off). Centring must show: every W_U column gets a random multiple of the all-ones vector, and
under LayerNorm (GPT-2, Pythia, where TransformerLens centred the writing weights) so do the W_O and
W_out rows; the LayerNorm model does not see them (its norms remove the mean), the RMSNorm model
reads them. So an attribution that centres under RMSNorm, or does not under LayerNorm, is off, and
the tests check that their data shows it. Each test says which bug turns it red.
"""

import copy

import pytest
import torch
from transformer_lens import HookedTransformer, HookedTransformerConfig

from interp.attention import head_dla, head_patching, head_results, head_weight_change
from interp.families import UnsupportedModel, centre_like_final_norm, final_norm_centres, gqa_group, require_site
from interp.feature_diff import direction_logits
from interp.logits import logit_diff, prompt_tokens, residual_sentiment_direction, sentiment_tokens
from interp.neurons import neuron_dla
from interp.residual import (
    component_logit_diff,
    decompose_final_resid,
    hybrid_logits_fn,
    logit_lens_logit_diff,
    logit_lens_logprobs,
    patched_residual_logits,
)
from interp.sae import SAESettings, load_or_train
from interp.toy import toy_tokenizer

FAMILIES = ("gpt2", "pythia", "llama", "qwen2", "gemma")
PROMPTS = ["This movie was really", "I watched this film and it was", "The plot"]
TOL = 1e-4

pytestmark = pytest.mark.usefixtures("one_thread")


def _load(folder) -> HookedTransformer:
    from rlhf_scratch.models.loading import load_lm

    return load_lm(str(folder)).eval()


@pytest.fixture(scope="module", params=FAMILIES)
def family(request, family_folder):
    """(name, model with the biases of the module docstring, sentiment, tokens, last)."""
    model = _load(family_folder(request.param))
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for param_name, param in model.named_parameters():
            if param_name.split(".")[-1].lstrip("_").startswith("W_"):
                param.mul_(8.0)
        for block in model.blocks:
            block.attn.b_O.copy_(0.2 * torch.randn(model.cfg.d_model, generator=g))
            block.mlp.b_out.copy_(0.2 * torch.randn(model.cfg.d_model, generator=g))
            if final_norm_centres(model):
                block.attn.W_O.add_(0.2 * torch.randn(model.cfg.n_heads, model.cfg.d_head, 1, generator=g))
                block.mlp.W_out.add_(0.2 * torch.randn(model.cfg.d_mlp, 1, generator=g))
        model.unembed.b_U.copy_(0.2 * torch.randn(model.cfg.d_vocab, generator=g))
        model.unembed.W_U.add_(0.2 * torch.randn(1, model.cfg.d_vocab, generator=g))
    st = sentiment_tokens(model)
    tokens, last = prompt_tokens(model, PROMPTS)
    return request.param, model, st, tokens, last


def _bias_attr(cache, st, last, biases: torch.Tensor, tokens) -> torch.Tensor:
    """DLA of a per-layer bias (layer x d_model) written at every position: layer -> nats (batch mean)."""
    stack = biases[:, None, None].expand(-1, *tokens.shape, -1)
    scaled = cache.apply_ln_to_stack(stack, layer=-1)
    return (scaled[:, torch.arange(len(last)), last] @ residual_sentiment_direction(cache.model, st)).mean(-1)


def test_each_block_writes_its_heads_plus_b_O_and_its_neurons_times_W_out_plus_b_out(family):
    # red if: a gated MLP's hook_post were not the factor W_out multiplies (then no neuron attribution
    # exists), a head's z / W_O were per K/V head, or a parallel block added anything beyond the two.
    name, model, st, tokens, last = family
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens)
        heads = head_results(cache).reshape(model.cfg.n_layers, model.cfg.n_heads, *tokens.shape, -1)
    for layer, block in enumerate(model.blocks):
        attn_out, mlp_out = cache["attn_out", layer], cache["mlp_out", layer]
        torch.testing.assert_close(heads[layer].sum(0) + block.attn.b_O, attn_out, atol=TOL, rtol=0)
        torch.testing.assert_close(cache["post", layer] @ block.mlp.W_out + block.mlp.b_out, mlp_out, atol=TOL, rtol=0)
        torch.testing.assert_close(cache["resid_pre", layer] + attn_out + mlp_out, cache["resid_post", layer],
                                   atol=TOL, rtol=0, msg=f"{name}: the residual is not resid_pre + attn + mlp")


def test_logit_lens_at_the_last_site_is_the_models_own_output(family):
    # red if: the lens normalized with a LayerNorm's centring on an RMSNorm model (or skipped it on a
    # LayerNorm one), or read the unembedding without b_U.
    name, model, st, tokens, last = family
    with torch.no_grad():
        logits, cache = model.run_with_cache(tokens)
        lens, labels = logit_lens_logprobs(cache)
        lens_ld, _ = logit_lens_logit_diff(cache, st, last)
    assert labels[-1] == "final_post" and len(labels) == model.cfg.n_layers + 1
    torch.testing.assert_close(lens[-1], logits.log_softmax(-1), atol=TOL, rtol=0)
    torch.testing.assert_close(lens_ld[-1], logit_diff(logits, st, last), atol=TOL, rtol=0)


def test_decomposition_sums_to_the_final_residual_and_to_the_logit_diff(family):
    # red if: a component were missing (pos_embed assumed on a rotary model, Gemma's √d scale applied
    # after hook_embed) or the final-norm step centred an RMSNorm model's components.
    name, model, st, tokens, last = family
    with torch.no_grad():
        logits, cache = model.run_with_cache(tokens)
        parts, labels = decompose_final_resid(cache)
        attrs, _ = component_logit_diff(cache, st, last)
    assert ("pos_embed" in labels) == (model.cfg.positional_embedding_type == "standard")
    torch.testing.assert_close(parts.sum(0), cache["resid_post", -1], atol=TOL, rtol=0)
    torch.testing.assert_close(attrs.sum(0), logit_diff(logits, st, last), atol=TOL, rtol=0)


def test_heads_neurons_embeddings_and_biases_sum_to_the_logit_diff(family):
    # red if: per-neuron DLA centred W_out under RMSNorm (Llama, Qwen2, Gemma), as it did when it
    # assumed GPT-2's LayerNorm, or did not centre under LayerNorm (the next test shows that the
    # data tells them apart, neuron by neuron), or a per-head DLA mixed K/V heads with query heads.
    name, model, st, tokens, last = family
    with torch.no_grad():
        logits, cache = model.run_with_cache(tokens)
        heads, neurons = head_dla(cache, st, last), neuron_dla(cache, st, last)
        parts, labels = component_logit_diff(cache, st, last)
        b_O = _bias_attr(cache, st, last, torch.stack([b.attn.b_O for b in model.blocks]), tokens)
        b_out = _bias_attr(cache, st, last, torch.stack([b.mlp.b_out for b in model.blocks]), tokens)
    assert heads.shape == (model.cfg.n_layers, model.cfg.n_heads) and neurons.shape == (model.cfg.n_layers, model.cfg.d_mlp)
    rest = sum(parts[labels.index(n)].mean() for n in labels if n in ("embed", "pos_embed", "bias"))
    total = heads.sum() + b_O.sum() + neurons.sum() + b_out.sum() + rest
    assert total.item() == pytest.approx(logit_diff(logits, st, last).mean().item(), abs=TOL), name
    for layer in range(model.cfg.n_layers):
        attn, mlp = parts[labels.index(f"{layer}_attn_out")].mean(), parts[labels.index(f"{layer}_mlp_out")].mean()
        assert (heads[layer].sum() + b_O[layer]).item() == pytest.approx(attn.item(), abs=TOL), f"{name} L{layer} heads"
        assert (neurons[layer].sum() + b_out[layer]).item() == pytest.approx(mlp.item(), abs=TOL), f"{name} L{layer} neurons"


def test_neuron_dla_equals_transformer_lens_own_neuron_stack(family):
    # red if: neuron_dla disagreed, neuron by neuron, with TransformerLens' stack_neuron_results
    # (apply_ln=True), which centres exactly where the model's norm does: e.g. centring under RMSNorm
    # or not centring under LayerNorm.
    name, model, st, tokens, last = family
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens)
        stack = cache.stack_neuron_results(layer=-1, apply_ln=True)[:, torch.arange(len(last)), last]
        direction = residual_sentiment_direction(model, st)
        by_tl = (stack @ direction).mean(-1)  # layer*d_mlp
        ours = neuron_dla(cache, st, last)
    torch.testing.assert_close(ours.flatten(), by_tl, atol=TOL, rtol=0)
    raw = cache.stack_neuron_results(layer=-1, apply_ln=False)[:, torch.arange(len(last)), last]
    raw = raw / cache["ln_final.hook_scale"][torch.arange(len(last)), last]
    wrong = raw if final_norm_centres(model) else raw - raw.mean(-1, keepdim=True)  # the other choice
    assert ((wrong @ direction).mean(-1) - by_tl).abs().max() > 10 * TOL, f"{name}: centring would not be caught"


def test_a_feature_direction_moves_the_logits_as_the_final_norm_does_at_a_frozen_scale(family):
    # red if: direction_logits centred the direction under RMSNorm (or did not under LayerNorm).
    name, model, st, tokens, last = family
    g = torch.Generator().manual_seed(3)
    d = torch.randn(model.cfg.d_model, generator=g) + 0.5  # a mean the two norms treat differently
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens)
        x = cache["resid_post", -1][:1, -1:]  # [1, 1, d_model]
        s = cache["ln_final.hook_scale"][0, -1, 0].item()
        frozen = [("ln_final.hook_scale", lambda scale, hook: torch.full_like(scale, s))]
        with model.hooks(fwd_hooks=frozen):
            moved = model.unembed(model.ln_final(x + d)) - model.unembed(model.ln_final(x))
        ours = direction_logits(model, d, s)
    torch.testing.assert_close(ours, moved[0, 0], atol=TOL, rtol=0)
    other = (d if final_norm_centres(model) else d - d.mean()) / s @ model.W_U  # the other centring choice
    assert (other - ours).abs().max() > 100 * TOL, f"{name}: the data cannot tell centring from not"


def test_weight_change_of_one_kv_head_shows_on_exactly_the_query_heads_that_read_it(family):
    # red if: W_K / W_V were indexed by query head on the K/V tensor, or the group were tiled
    # (h % n_kv) instead of consecutive (h // group): the heads whose patterns move would not match.
    name, model, st, tokens, last = family
    layer, kv = 1, (model.cfg.n_key_value_heads or model.cfg.n_heads) - 1  # Llama: K/V head 1, read by heads 2, 3
    tuned = copy.deepcopy(model)
    attn = tuned.blocks[layer].attn
    with torch.no_grad():
        weight = attn._W_K if hasattr(attn, "_W_K") else attn.W_K  # the parameter: n_key_value_heads rows
        weight[kv] += 0.5 * torch.randn(weight.shape[1:], generator=torch.Generator().manual_seed(5))
        change = head_weight_change(model, tuned)
        _, ref_cache = model.run_with_cache(tokens)
        _, tuned_cache = tuned.run_with_cache(tokens)
    moved = (tuned_cache["pattern", layer] - ref_cache["pattern", layer]).abs().amax((0, 2, 3)) > 1e-6
    group = gqa_group(model)
    expected = torch.tensor([h // group == kv for h in range(model.cfg.n_heads)])
    assert torch.equal(moved, expected), f"{name}: the patterns that moved are not K/V head {kv}'s group"
    assert torch.equal(change["W_K"][layer] > 0, expected), change["W_K"]
    assert change["W_K"][layer][expected].unique().numel() == 1, "one shared K/V head, one value per group"
    for other in ("W_Q", "W_V", "W_O"):
        assert change[other].abs().max() == 0, other
    assert change["W_K"][1 - layer].abs().max() == 0


def test_hybrid_model_equals_residual_patching_at_every_site(family):
    # red if: starting the reference at a middle block lost the rotary positions or the K/V grouping.
    name, model, st, tokens, last = family
    tuned = copy.deepcopy(model)
    with torch.no_grad():
        tuned.blocks[0].mlp.W_out.mul_(1.5)
        _, tuned_cache = tuned.run_with_cache(tokens)
        for site in range(model.cfg.n_layers + 1):
            hybrid = hybrid_logits_fn(model, tuned, site)(tokens)
            patched = patched_residual_logits(model, tokens, tuned_cache, [site])
            torch.testing.assert_close(hybrid, patched, atol=TOL, rtol=0, msg=f"{name} site {site}")


# --- refusals: one line, naming the family and the reason --------------------------------------------


def _toy(**cfg) -> HookedTransformer:
    tok = toy_tokenizer()
    base = dict(n_layers=2, d_model=16, n_heads=2, d_head=8, d_mlp=32, n_ctx=32, d_vocab=len(tok), act_fn="gelu",
                normalization_type="RMS", seed=0)
    return HookedTransformer(HookedTransformerConfig(**(base | cfg)), tokenizer=tok).eval()


def _one_line_naming(err: pytest.ExceptionInfo, *words: str) -> None:
    message = str(err.value)
    assert "\n" not in message and all(w in message for w in words), message


def test_soft_capped_logits_are_refused_by_every_sum_and_the_lens():
    model = _toy(output_logits_soft_cap=30.0, original_architecture="Gemma2ForCausalLM")
    st = sentiment_tokens(model)
    tokens, last = prompt_tokens(model, PROMPTS)
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens)
    for analysis in (lambda: head_dla(cache, st, last), lambda: neuron_dla(cache, st, last),
                     lambda: component_logit_diff(cache, st, last), lambda: logit_lens_logit_diff(cache, st, last),
                     lambda: direction_logits(model, torch.ones(16), 1.0)):
        with pytest.raises(UnsupportedModel) as err:
            analysis()
        _one_line_naming(err, "Gemma2ForCausalLM", "soft-caps")


def test_normalized_block_outputs_refuse_heads_and_neurons_but_not_the_layer_decomposition():
    model = _toy(use_normalization_before_and_after=True, original_architecture="Gemma2ForCausalLM")
    st = sentiment_tokens(model)
    tokens, last = prompt_tokens(model, PROMPTS)
    with torch.no_grad():
        logits, cache = model.run_with_cache(tokens)
        attrs, _ = component_logit_diff(cache, st, last)  # attn_out / mlp_out are after the norm: still exact
    torch.testing.assert_close(attrs.sum(0), logit_diff(logits, st, last), atol=TOL, rtol=0)
    for analysis in (lambda: head_dla(cache, st, last), lambda: neuron_dla(cache, st, last),
                     lambda: head_patching(model, model, tokens, st, last)):
        with pytest.raises(UnsupportedModel) as err:
            analysis()
        _one_line_naming(err, "Gemma2ForCausalLM", "normalizes each attention and MLP output")


def test_an_sae_on_resid_mid_is_refused_for_parallel_blocks_only(family_folder, tmp_path):
    pythia, llama = _load(family_folder("pythia")), _load(family_folder("llama"))
    with pytest.raises(UnsupportedModel) as err:
        load_or_train(pythia, "blocks.0.hook_resid_mid", SAESettings(), tmp_path,
                      texts=lambda split: pytest.fail("refused before any text is read"))
    _one_line_naming(err, "GPTNeoXForCausalLM", "parallel", "resid_mid")
    require_site(llama, "blocks.0.hook_resid_mid")  # sequential blocks have one
    with pytest.raises(UnsupportedModel) as err:
        require_site(llama, "blocks.9.hook_resid_post")
    _one_line_naming(err, "LlamaForCausalLM")


def test_centring_follows_the_final_norm():
    x = torch.tensor([1.0, 2.0, 6.0])
    assert torch.equal(centre_like_final_norm(_toy(normalization_type="LN"), x), torch.tensor([-2.0, -1.0, 3.0]))
    assert torch.equal(centre_like_final_norm(_toy(normalization_type="RMS"), x), x)
