"""interp.attention: per-head DLA, weight change, ablation, patching — known answers."""

import pytest
import torch

from interp.attention import (
    head_ablation_effects,
    head_ablation_reward,
    head_dla,
    head_dla_diff,
    head_means,
    head_patching,
    head_weight_change,
    plot_attention_patterns,
    top_heads,
)
from interp.logits import logit_diff, prompt_tokens, residual_sentiment_direction, sentiment_tokens
from interp.residual import component_logit_diff
from interp.toy import perturb_head, toy_model, toy_tokenizer

PROMPTS = ["This movie was really", "I watched this film and it was", "The plot"]


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def setup():
    ref = toy_model(seed=3, tokenizer=toy_tokenizer())
    with torch.no_grad():
        g = torch.Generator().manual_seed(4)
        for block in ref.blocks:  # non-zero b_O: it belongs to no head, the test must account for it
            block.attn.b_O.copy_(0.2 * torch.randn(ref.cfg.d_model, generator=g))
    st = sentiment_tokens(ref)
    tokens, last = prompt_tokens(ref, PROMPTS)
    return ref, st, tokens, last


def test_head_dla_plus_other_components_is_the_logit_diff(setup):
    ref, st, tokens, last = setup
    with torch.no_grad():
        logits, cache = ref.run_with_cache(tokens)
        heads = head_dla(cache, st, last)
        parts, labels = component_logit_diff(cache, st, last)
        b_O = torch.stack([b.attn.b_O for b in ref.blocks])[:, None, None].expand(-1, *tokens.shape, -1)
        scaled = cache.apply_ln_to_stack(b_O, layer=-1)
        b_O_attr = (scaled[:, torch.arange(len(last)), last] @ residual_sentiment_direction(ref, st)).mean(-1)
    others = sum(parts[i].mean() for i, name in enumerate(labels) if "attn" not in name)
    total = heads.sum() + b_O_attr.sum() + others
    assert total.item() == pytest.approx(logit_diff(logits, st, last).mean().item(), abs=1e-5)
    for layer in range(ref.cfg.n_layers):  # each layer's heads + its b_O = its attn_out's DLA
        attn = parts[labels.index(f"{layer}_attn_out")].mean()
        assert (heads[layer].sum() + b_O_attr[layer]).item() == pytest.approx(attn.item(), abs=1e-5)


def test_zeroed_W_O_head_has_zero_dla_and_zero_ablation_effect(setup):
    ref, st, tokens, last = setup
    model = perturb_head(ref, 0, 0, scale=0.0)
    with torch.no_grad():
        model.blocks[1].attn.W_O[3].zero_()
        _, cache = model.run_with_cache(tokens)
    assert head_dla(cache, st, last)[1, 3].item() == 0.0
    effects = head_ablation_effects(model, tokens, st, head_means(model, tokens, last), last)
    assert effects[1, 3].item() == 0.0, "ablating a head that writes nothing must change nothing"
    assert effects.abs().max() > 0, "other heads should matter in a random model"


def test_identical_models_give_zero_differences(setup):
    ref, st, tokens, last = setup
    with torch.no_grad():
        _, cache = ref.run_with_cache(tokens)
        _, cache2 = ref.run_with_cache(tokens)
    assert head_dla_diff(cache, cache2, st, last).abs().max() == 0
    assert all(w.abs().max() == 0 for w in head_weight_change(ref, ref).values())
    effects, fraction = head_patching(ref, ref, tokens, st, last)
    assert effects.abs().max() == 0 and torch.isnan(fraction).all()


@pytest.mark.parametrize("layer, head", [(0, 1), (1, 2)])
def test_one_changed_head_is_the_top_head_everywhere(setup, layer, head):
    ref, st, tokens, last = setup
    tuned = perturb_head(ref, layer, head, residual_sentiment_direction(ref, st), scale=4.0, seed=layer)
    with torch.no_grad():
        _, ref_cache = ref.run_with_cache(tokens)
        _, tuned_cache = tuned.run_with_cache(tokens)
    change = head_weight_change(ref, tuned)
    assert top_heads(change["all"], 1) == [(layer, head)]
    assert change["W_Q"].abs().max() == 0 and change["W_O"][layer, head] > 0
    assert top_heads(head_dla_diff(ref_cache, tuned_cache, st, last), 1) == [(layer, head)], "by DLA difference"
    effects, fraction = head_patching(ref, tuned, tokens, st, last)
    assert top_heads(effects, 1) == [(layer, head)], "by patching"
    assert fraction[layer, head].item() == pytest.approx(1.0, abs=1e-4), "the one changed head carries it all"


def test_head_means_ignore_padding(setup):
    ref, st, tokens, last = setup
    padded = torch.cat([tokens[:1], torch.zeros(1, 5, dtype=torch.long)], dim=1)
    a = head_means(ref, tokens[:1, : int(last[0]) + 1])
    b = head_means(ref, padded, last[:1])
    assert torch.allclose(a, b, atol=1e-6)


def test_ablation_reward_and_pattern_plot(setup, tmp_path):
    ref, st, tokens, last = setup
    means = head_means(ref, tokens, last)
    count = lambda texts: [float(len(t)) for t in texts]  # noqa: E731
    rewards, clean = head_ablation_reward(ref, [(0, 0), (1, 1)], means, "This movie was", count, 3, 4)
    assert len(rewards) == 2 and isinstance(clean, float)
    with torch.no_grad():
        _, cache = ref.run_with_cache(tokens[:1])
    str_tokens = ref.to_str_tokens(tokens[0, : int(last[0]) + 1])
    path = plot_attention_patterns(cache, [(0, 0), (1, 1)], str_tokens, tmp_path / "p.png")
    assert path.stat().st_size > 1000
