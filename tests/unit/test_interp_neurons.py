"""interp.neurons: per-neuron DLA, activation change, top tokens — known answers."""

import copy

import pytest
import torch

from interp.logits import prompt_tokens, residual_sentiment_direction, sentiment_tokens
from interp.neurons import (
    neuron_activation_change,
    neuron_dla,
    neuron_patching,
    top_activating_tokens,
    top_neurons,
)
from interp.residual import component_logit_diff
from interp.toy import toy_model, toy_tokenizer

PROMPTS = ["This movie was really", "I watched this film and it was", "The plot"]

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def setup():
    ref = toy_model(seed=3, tokenizer=toy_tokenizer())
    with torch.no_grad():  # non-zero b_out: it belongs to no neuron, the test must account for it
        g = torch.Generator().manual_seed(4)
        for block in ref.blocks:
            block.mlp.b_out.copy_(0.2 * torch.randn(ref.cfg.d_model, generator=g))
    st = sentiment_tokens(ref)
    tokens, last = prompt_tokens(ref, PROMPTS)
    return ref, st, tokens, last


def test_neurons_plus_b_out_make_up_each_layers_mlp_dla(setup):
    ref, st, tokens, last = setup
    with torch.no_grad():
        _, cache = ref.run_with_cache(tokens)
        neurons = neuron_dla(cache, st, last)
        parts, labels = component_logit_diff(cache, st, last)
        b_out = torch.stack([b.mlp.b_out for b in ref.blocks])[:, None, None].expand(-1, *tokens.shape, -1)
        scaled = cache.apply_ln_to_stack(b_out, layer=-1)
        b_out_attr = (scaled[:, torch.arange(len(last)), last] @ residual_sentiment_direction(ref, st)).mean(-1)
    assert neurons.shape == (ref.cfg.n_layers, ref.cfg.d_mlp)
    for layer in range(ref.cfg.n_layers):
        mlp = parts[labels.index(f"{layer}_mlp_out")].mean()
        assert (neurons[layer].sum() + b_out_attr[layer]).item() == pytest.approx(mlp.item(), abs=1e-5), (
            f"layer {layer}: the neurons and b_out must add up to the MLP's DLA"
        )


def test_zeroed_W_out_neuron_has_zero_attribution(setup):
    ref, st, tokens, last = setup
    model = copy.deepcopy(ref)
    with torch.no_grad():
        model.blocks[0].mlp.W_out[7].zero_()
        _, cache = model.run_with_cache(tokens)
    assert neuron_dla(cache, st, last)[0, 7].item() == 0.0
    assert neuron_dla(cache, st, last).abs().max() > 0


def test_a_model_differing_in_one_neurons_output_weights_finds_that_neuron(setup):
    ref, st, tokens, last = setup
    tuned = copy.deepcopy(ref)
    layer, n = ref.cfg.n_layers - 1, 11  # the last layer: nothing downstream reads its MLP but ln_final
    with torch.no_grad():
        tuned.blocks[layer].mlp.W_out[n] += 3.0 * residual_sentiment_direction(ref, st)
        _, ref_cache = ref.run_with_cache(tokens)
        _, tuned_cache = tuned.run_with_cache(tokens)
    diff = neuron_dla(tuned_cache, st, last) - neuron_dla(ref_cache, st, last)
    assert top_neurons(diff, 1) == [(layer, n)]
    change = neuron_activation_change(ref_cache, tuned_cache, tokens, last)
    assert change.abs().max().item() == 0.0, "no neuron reads the changed weights: activations are identical"


def test_activation_change_by_hand_on_real_positions_only(setup):
    ref, st, tokens, last = setup
    with torch.no_grad():
        _, cache = ref.run_with_cache(tokens)
    shifted = {k: v.clone() for k, v in cache.items()}
    post = shifted["blocks.1.mlp.hook_post"]
    post[..., 2] += 1.0  # every position: +1
    post[:, -1, 5] += 100.0  # only the last column, which is padding for the shorter prompts
    from transformer_lens import ActivationCache

    tuned_cache = ActivationCache(shifted, ref)
    change = neuron_activation_change(cache, tuned_cache, tokens, last)
    assert change[1, 2].item() == pytest.approx(1.0)
    real = (torch.arange(tokens.shape[1])[None] <= last[:, None]).float()
    expected = 100.0 * real[:, -1].sum() / real.sum()  # counted where the last column is a real token
    assert change[1, 5].item() == pytest.approx(expected.item(), rel=1e-5)
    assert change[0].abs().max() == 0


def test_top_activating_tokens_are_sorted_and_skip_padding(setup):
    ref, st, tokens, last = setup
    found = top_activating_tokens(ref, tokens, (1, 3), last, k=5)
    acts = [a for a, _, _ in found]
    assert acts == sorted(acts, reverse=True) and len(found) == 5
    with torch.no_grad():
        _, cache = ref.run_with_cache(tokens)
    post = cache["blocks.1.mlp.hook_post"][..., 3]
    real = torch.arange(tokens.shape[1])[None] <= last[:, None]
    assert acts[0] == pytest.approx(post[real].max().item())
    assert all(token in context for _, token, context in found)


def test_patching_the_one_neuron_that_reads_differently_recovers_the_whole_gap(setup):
    ref, st, tokens, last = setup
    tuned = copy.deepcopy(ref)
    layer, n = ref.cfg.n_layers - 1, 5
    with torch.no_grad():  # the neuron reads differently (W_in), writes the same (W_out)
        tuned.blocks[layer].mlp.W_in[:, n] += 2.0 * torch.randn(ref.cfg.d_model, generator=torch.Generator().manual_seed(1))
        tuned.blocks[layer].mlp.W_out[n] += 3.0 * residual_sentiment_direction(ref, st)  # make it matter
    ref_copy = copy.deepcopy(ref)
    with torch.no_grad():
        ref_copy.blocks[layer].mlp.W_out[n] += 3.0 * residual_sentiment_direction(ref, st)  # same writer
    effects, fraction = neuron_patching(ref_copy, tuned, tokens, st, [(layer, n), (layer, n + 1)], last)
    assert fraction[0].item() == pytest.approx(1.0, abs=1e-4), "the only difference is this neuron's activation"
    assert effects[1].item() == 0.0, "a neuron whose activation did not change patches to nothing"
