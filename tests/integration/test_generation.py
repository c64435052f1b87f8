"""Sampling and scoring over left-padded prompts: padding changes nothing, EOS ends a completion,
top-k draws only among the k largest logits, top-p only inside the nucleus (transformers' rule); the static KV cache computes TransformerLens' logits
and samples its tokens, and models it does not cover fall back to TransformerLens' cache."""

import math

import pytest
import torch

from rlhf_scratch.algorithms.ppo import TransformerWithValueHead
from rlhf_scratch.core.objectives import generated_span
from rlhf_scratch.models.loading import load_lm
from rlhf_scratch.models.static_cache import StaticCacheDecoder, unsupported_reason
from rlhf_scratch.rollout.generation import (
    TransformerLensCacheDecoder,
    generate,
    get_samples,
    make_decoder,
    nucleus,
    pad_token_id,
    sample_next_token,
    tokenize_prompts,
)
from rlhf_scratch.rollout.phase import score_tokens

PROMPTS = ["This movie was really", "A", "The acting in this film is not what I"]


@pytest.fixture(scope="module")
def lm(one_thread):
    return load_lm("tiny").eval()


@pytest.fixture(scope="module")
def policy_and_ref(lm):
    torch.manual_seed(0)
    policy = TransformerWithValueHead(load_lm("tiny")).eval()
    return policy, lm


def test_tokenize_prompts_left_pads(lm):
    ids, mask = tokenize_prompts(lm, PROMPTS, prepend_bos=True)
    lengths = [lm.to_tokens(p).shape[1] for p in PROMPTS]
    assert ids.shape == (3, max(lengths))
    for row, n in enumerate(lengths):
        assert mask[row].tolist() == [False] * (ids.shape[1] - n) + [True] * n, "padding must be on the left"
        assert torch.equal(ids[row, -n:], lm.to_tokens(PROMPTS[row])[0])


def test_left_padded_batch_scores_each_token_as_the_prompt_alone(policy_and_ref):
    """log π, log π_ref, V and the KL of every real token: padded batch vs each prompt on its own."""
    policy, ref = policy_and_ref
    lm = policy.base
    gen_len = 6
    prompt_ids, prompt_mask = tokenize_prompts(lm, PROMPTS, prepend_bos=True)
    completion = torch.randint(1, lm.cfg.d_vocab, (len(PROMPTS), gen_len))
    ids = torch.cat([prompt_ids, completion], dim=1)
    mask = torch.cat([prompt_mask, torch.ones_like(completion, dtype=torch.bool)], dim=1)
    batch = score_tokens(policy, ref, ids, mask, prompt_ids.shape[1], chunk_size=3)
    assert (~prompt_mask).any(), "the test needs a padded row"
    for row, prompt in enumerate(PROMPTS):
        alone_prompt = lm.to_tokens(prompt)
        alone_ids = torch.cat([alone_prompt, completion[row : row + 1]], dim=1)
        alone = score_tokens(policy, ref, alone_ids, torch.ones_like(alone_ids, dtype=torch.bool),
                             alone_prompt.shape[1], chunk_size=1)
        for key in ("logprobs", "ref_logprobs", "kl", "entropy"):
            diff = (batch[key][row] - alone[key][0]).abs().max().item()
            assert diff <= 1e-4, f"{key} of row {row} differs by {diff} between the padded batch and alone"
        v_batch = batch["values"][row, generated_span(prompt_ids.shape[1])]
        v_alone = alone["values"][0, generated_span(alone_prompt.shape[1])]
        assert (v_batch - v_alone).abs().max().item() <= 1e-4, "value head sees the padding"


@pytest.mark.parametrize("kv_cache", ["static", "transformer_lens"])
def test_greedy_generation_with_padding_and_cache_matches_each_prompt_alone(lm, kv_cache):
    """top_k = 1 is greedy: the KV-cached, left-padded loop must pick the same tokens as one prompt alone."""
    prompt_ids, prompt_mask = tokenize_prompts(lm, PROMPTS, prepend_bos=True)
    batch_ids, _ = generate(lm, prompt_ids, prompt_mask, gen_len=8, top_k=1, kv_cache=kv_cache)
    for row, prompt in enumerate(PROMPTS):
        alone = lm.to_tokens(prompt)
        ids, _ = generate(lm, alone, torch.ones_like(alone, dtype=torch.bool), gen_len=8, top_k=1, kv_cache=kv_cache)
        assert torch.equal(batch_ids[row], ids[0]), f"row {row}: padded batch generated different tokens"
        # and against a full forward pass without any cache: each greedy token is the argmax
        full = torch.cat([alone, ids], dim=1)
        argmax = lm(full)[0, alone.shape[1] - 1 : -1].argmax(-1)
        assert torch.equal(argmax, ids[0]), "the KV cache changed the model's prediction"


@pytest.mark.parametrize("kv_cache", ["static", "transformer_lens"])
def test_stop_at_eos_masks_everything_after_the_first_eos(kv_cache):
    lm = load_lm("tiny").eval()
    eos = lm.tokenizer.eos_token_id
    with torch.no_grad():
        lm.unembed.b_U[eos] += 100.0  # EOS is now certain at every step
    prompt_ids, prompt_mask = tokenize_prompts(lm, PROMPTS[:2], prepend_bos=True)
    ids, mask = generate(lm, prompt_ids, prompt_mask, gen_len=5, top_k=10, stop_at_eos=True, kv_cache=kv_cache)
    assert mask.tolist() == [[True, False, False, False, False]] * 2, "only the EOS itself is kept"
    assert ids[:, 0].tolist() == [eos, eos]
    ids, mask = generate(lm, prompt_ids, prompt_mask, gen_len=5, top_k=10, stop_at_eos=False, kv_cache=kv_cache)
    assert mask.all() and (ids == eos).all(), "without stop_at_eos every token is kept (the blog)"
    _, texts = get_samples(lm, "This movie", 2, 5, 1.0, 10, True, stop_at_eos=True)
    assert texts == ["This movie", "This movie"], "the EOS that ended a completion is not in its text"


def test_top_k_draws_only_among_the_k_largest_with_the_right_probabilities():
    torch.manual_seed(0)
    # logits: token 3 has log 3, token 1 has 0, all else -1 → top-2 probabilities 3/4 and 1/4
    logits = torch.full((200_000, 6), -1.0)
    logits[:, 3], logits[:, 1] = math.log(3.0), 0.0
    tokens = sample_next_token(logits, temperature=1.0, top_k=2)
    assert set(tokens.unique().tolist()) == {1, 3}, "a token outside the top-k was drawn"
    assert (tokens == 3).float().mean().item() == pytest.approx(0.75, abs=0.005)
    # temperature 2 flattens: p(3) = 3^(1/2) / (3^(1/2) + 1) = 0.634
    tokens = sample_next_token(logits, temperature=2.0, top_k=2)
    assert (tokens == 3).float().mean().item() == pytest.approx(math.sqrt(3) / (math.sqrt(3) + 1), abs=0.005)


# probabilities 0.5, 0.3, 0.15, 0.05 put in a shuffled order (the rule sorts; the result must land back in place)
NUCLEUS_PROBS = torch.tensor([0.15, 0.5, 0.05, 0.3])


@pytest.mark.parametrize("top_p, kept", [
    (0.75, {1, 3}),  # 0.5 + 0.3 = 0.8 reaches 0.75; the 0.3 token is in (the one that crosses top_p)
    (0.85, {0, 1, 3}),  # 0.8 < 0.85: the 0.15 token is needed too
    (0.4, {1}),  # the most likely alone already holds 0.5 ≥ 0.4
    (1e-9, {1}),  # the most likely token is always kept
    (1.0, {0, 1, 2, 3}),  # top_p = 1: nothing dropped
])
def test_the_nucleus_is_the_smallest_most_likely_set_reaching_top_p_by_hand(top_p, kept):
    """Ascending, the cumulative masses are 0.05, 0.20, 0.50, 1.00; a token is dropped where its
    cumulative mass is ≤ 1 − top_p (transformers' TopPLogitsWarper). Keeping only the tokens whose OWN
    mass reaches top_p, or dropping the crossing token, gives {1} at 0.75 (red)."""
    logits = NUCLEUS_PROBS.log()[None]
    out = nucleus(logits, top_p)
    assert set(torch.isfinite(out[0]).nonzero().flatten().tolist()) == kept
    assert torch.equal(out[torch.isfinite(out)], logits[torch.isfinite(out)]), "the kept logits are unchanged"


def test_the_nucleus_is_transformers_top_p_warper_on_random_logits():
    from transformers.generation.logits_process import TopPLogitsWarper

    torch.manual_seed(0)
    logits = 3 * torch.randn(64, 50)
    for top_p in (0.1, 0.5, 0.9, 0.99):
        theirs = TopPLogitsWarper(top_p)(None, logits.clone())
        assert torch.equal(torch.isfinite(nucleus(logits, top_p)), torch.isfinite(theirs)), top_p


def test_top_p_draws_only_inside_the_nucleus_with_renormalised_probabilities():
    torch.manual_seed(0)
    logits = NUCLEUS_PROBS.log().expand(200_000, 4)
    tokens = sample_next_token(logits, top_p=0.75)
    assert set(tokens.unique().tolist()) == {1, 3}, "a token outside the nucleus was drawn"
    assert (tokens == 1).float().mean().item() == pytest.approx(0.5 / 0.8, abs=0.005)
    # top-k first, then top-p on the k renormalised: 0.5, 0.3, 0.15 → 0.526, 0.316, 0.158; at top_p 0.8 the
    # cumulative 0.158 ≤ 0.2 is dropped (the order transformers applies them in)
    tokens = sample_next_token(logits, top_k=3, top_p=0.8)
    assert set(tokens.unique().tolist()) == {1, 3}


def test_generated_tokens_always_lie_in_the_nucleus_of_the_models_logits(lm):
    """64 samples of 6 tokens at T = 0.7, top_p = 0.3: each token is inside the nucleus of softmax(z / T)
    at its position (recomputed by a full forward without cache); and top_p = 1 draws what no top-p drew."""
    prompt_ids, prompt_mask = tokenize_prompts(lm, [PROMPTS[0]] * 64, prepend_bos=True)
    torch.manual_seed(3)
    ids, _ = generate(lm, prompt_ids, prompt_mask, gen_len=6, temperature=0.7, top_p=0.3)
    P = prompt_ids.shape[1]
    with torch.no_grad():
        logits = lm(torch.cat([prompt_ids, ids], 1))[:, P - 1 : -1]  # [64, 6, V]
    allowed = torch.isfinite(nucleus((logits / 0.7).flatten(0, 1), 0.3)).view(*ids.shape, -1)
    assert allowed.gather(-1, ids[..., None]).all(), "a token outside the nucleus was drawn"
    assert allowed.sum(-1).float().mean() < 20, "the nucleus must be small here, or the test proves little"
    torch.manual_seed(3)
    plain, _ = generate(lm, prompt_ids, prompt_mask, gen_len=6, temperature=0.7)
    torch.manual_seed(3)
    assert torch.equal(generate(lm, prompt_ids, prompt_mask, gen_len=6, temperature=0.7, top_p=1.0)[0], plain)


def test_get_samples_keeps_the_blog_signature(lm):
    torch.manual_seed(0)
    ids, texts = get_samples(lm, "This movie was really", 4, 7, 1.0, 10, True)
    prefix_len = lm.to_tokens("This movie was really").shape[1]
    assert ids.shape == (4, prefix_len + 7)
    assert (ids[:, :prefix_len] == lm.to_tokens("This movie was really")).all()
    assert all(t.startswith("This movie was really") for t in texts)
    assert texts[0] == "This movie was really" + lm.tokenizer.decode(ids[0, prefix_len:].tolist())
    with pytest.raises(ValueError, match="3 prompts for batch_size 4"):
        get_samples(lm, PROMPTS, 4, 7, 1.0, 10, True)


def test_rollout_log_probs_kl_and_entropy_are_of_the_sampled_distribution_at_temperature(lm):
    """Sampled from softmax(z / T): log π_old, log π_ref, the KL and the entropy must be of that
    distribution (at T = 0.5 the T = 1 numbers differ by nats), and the learning phase's
    `policy_sequence_log_probs` must score at the same T (ratio 1 before any step)."""
    from rlhf_scratch.rollout.phase import make_rollout, policy_sequence_log_probs

    torch.manual_seed(0)
    ref = load_lm("tiny").eval()
    with torch.no_grad():
        for p in lm.parameters():  # a policy that differs from the reference, so the KL is not 0
            p.add_(0.02 * torch.randn_like(p))
    try:
        rollout = make_rollout(lm, ref, PROMPTS[:2], lambda prompts, completions, **kw: [0.0] * len(prompts),
                               num_generations=2, gen_len=5, temperature=0.5, chunk_size=3)
        assert rollout.temperature == 0.5
        with torch.no_grad():
            span = generated_span(rollout.prefix_len)
            z = lm(rollout.sample_ids, attention_mask=rollout.attention_mask.long())[:, span]
            z_ref = ref(rollout.sample_ids, attention_mask=rollout.attention_mask.long())[:, span]
            lp, lp_ref = (z / 0.5).log_softmax(-1), (z_ref / 0.5).log_softmax(-1)
            tok = rollout.completion_ids[..., None]
            torch.testing.assert_close(rollout.logprobs, lp.gather(-1, tok)[..., 0], atol=1e-4, rtol=0)
            torch.testing.assert_close(rollout.ref_logprobs, lp_ref.gather(-1, tok)[..., 0], atol=1e-4, rtol=0)
            torch.testing.assert_close(rollout.entropy, -(lp.exp() * lp).sum(-1), atol=1e-4, rtol=0)
            torch.testing.assert_close(rollout.kl, (lp.exp() * (lp - lp_ref)).sum(-1), atol=1e-4, rtol=0)
            at_one = z.log_softmax(-1).gather(-1, tok)[..., 0]
            assert (at_one - rollout.logprobs).abs().max() > 0.1, "the T = 1 log-probs are far off: the test can tell"
            now = policy_sequence_log_probs(lm, rollout, torch.arange(len(rollout)), chunk_logits=2**21)
        torch.testing.assert_close(now, rollout.logprobs.sum(-1), atol=1e-4, rtol=0)
    finally:
        lm.load_state_dict(load_lm("tiny").state_dict())


# --- the static KV cache (rlhf_scratch/models/static_cache.py) ----------------------------------------


def static_logits_step_by_step(model, prompt_ids, prompt_mask, completion, cuda_graph=False):
    """The static decoder's next-token logits after the prompt and after each completion token,
    [batch, gen_len, d_vocab]. The cache is filled with garbage first: a step that read a column
    not written yet would show it."""
    gen_len = completion.shape[1]
    with torch.inference_mode():
        decoder = StaticCacheDecoder(model, prompt_ids, prompt_mask, gen_len, cuda_graph=cuda_graph)
        decoder.cache.keys.fill_(1e4)
        decoder.cache.values.fill_(-1e4)
        logits = [decoder.prefill().clone()]
        logits += [decoder.step(completion[:, t]).clone() for t in range(gen_len - 1)]
    return torch.stack(logits, dim=1), decoder


def full_forward_logits(model, prompt_ids, prompt_mask, completion):
    """TransformerLens' whole forward (no cache) at the positions that predict the completion."""
    ids = torch.cat([prompt_ids, completion], dim=1)
    mask = torch.cat([prompt_mask, torch.ones_like(completion, dtype=torch.bool)], dim=1)
    with torch.inference_mode():
        return model(ids, attention_mask=mask.long())[:, prompt_ids.shape[1] - 1 : -1]


def test_static_cache_logits_equal_transformer_lens_full_forward_with_left_padding(lm):
    """Prompts of three lengths, left-padded: the prefill and every decode step give the logits
    of TransformerLens' forward over the whole sequence (positions cumsum(mask) - 1, pad columns
    and unwritten columns masked)."""
    prompt_ids, prompt_mask = tokenize_prompts(lm, PROMPTS, prepend_bos=True)
    assert len(set(prompt_mask.sum(1).tolist())) == 3, "the test needs three prompt lengths"
    completion = torch.randint(1, lm.cfg.d_vocab, (len(PROMPTS), 7))
    static, _ = static_logits_step_by_step(lm, prompt_ids, prompt_mask, completion)
    full = full_forward_logits(lm, prompt_ids, prompt_mask, completion)
    diff = (static - full).abs().max().item()
    assert diff <= 1e-5, f"static-cache logits differ from TransformerLens' full forward by {diff}"


def test_static_cache_runs_a_gpt2_shaped_model_with_unfolded_layer_norm(tiny_random_lm):
    """The gpt2 preset's cfg differs from tiny's only in size; a model with LayerNorm weights not
    folded (normalization_type "LN") and scores scaled by the layer index also matches."""
    from transformer_lens import HookedTransformer, HookedTransformerConfig

    cfg = HookedTransformerConfig(**{**tiny_random_lm.cfg.to_dict(), "act_fn": "gelu_new",
                                     "scale_attn_by_inverse_layer_idx": True})
    model = HookedTransformer(cfg).eval()
    with torch.no_grad():  # LayerNorm weights and biases that are not 1 and 0
        for name, p in model.named_parameters():
            if "ln" in name or name.endswith(("b_Q", "b_K", "b_V", "b_O", "b_U")):
                p.add_(0.3 * torch.randn_like(p))
    assert unsupported_reason(model) is None
    prompt_ids = torch.randint(1, 50, (3, 5))
    prompt_mask = torch.tensor([[True] * 5, [False, False, True, True, True], [False] * 4 + [True]])
    completion = torch.randint(1, 50, (3, 6))
    static, _ = static_logits_step_by_step(model, prompt_ids, prompt_mask, completion)
    diff = (static - full_forward_logits(model, prompt_ids, prompt_mask, completion)).abs().max().item()
    assert diff <= 1e-5, f"static-cache logits differ from TransformerLens' by {diff} with unfolded LayerNorm"


@pytest.mark.parametrize("top_k, stop_at_eos", [(10, False), (0, False), (10, True)])
def test_static_and_transformer_lens_caches_sample_the_same_tokens_under_one_seed(lm, top_k, stop_at_eos):
    """The default PPO rollout's shape (64 × 30), left-padded prompts: one seed, the same tokens,
    masks and random-number consumption (the next draw after generation agrees too). With
    `stop_at_eos` EOS is made likely, so rows end at different steps and the loop stops early."""
    eos = lm.tokenizer.eos_token_id
    prompts = [PROMPTS[i % 3] for i in range(64)]
    prompt_ids, prompt_mask = tokenize_prompts(lm, prompts, prepend_bos=True)
    bump = 6.0 if stop_at_eos else 0.0
    with torch.no_grad():
        lm.unembed.b_U[eos] += bump
    try:
        out = {}
        for kv_cache in ("static", "transformer_lens"):
            torch.manual_seed(1)
            ids, mask = generate(lm, prompt_ids, prompt_mask, 30, temperature=1.0, top_k=top_k,
                                 stop_at_eos=stop_at_eos, kv_cache=kv_cache)
            out[kv_cache] = ids, mask, torch.rand(3)
    finally:
        with torch.no_grad():
            lm.unembed.b_U[eos] -= bump
    (s_ids, s_mask, s_next), (t_ids, t_mask, t_next) = out["static"], out["transformer_lens"]
    assert torch.equal(s_ids, t_ids), f"{(s_ids != t_ids).sum().item()} tokens differ between the two caches"
    assert torch.equal(s_mask, t_mask), "the completion masks differ"
    assert torch.equal(s_next, t_next), "the two loops drew a different amount of random numbers"
    if stop_at_eos:
        lengths = s_mask.sum(1)
        assert lengths.min() < lengths.max() < 30, "the test needs rows that end at different steps"


def test_the_tiny_lm_decodes_with_the_static_cache_and_a_hooked_model_with_transformer_lens(lm):
    prompt_ids, prompt_mask = tokenize_prompts(lm, PROMPTS, prepend_bos=True)
    assert isinstance(make_decoder(lm, prompt_ids, prompt_mask, 4), StaticCacheDecoder)

    def push_to_token_7(logits, hook):
        return logits + 1e3 * (torch.arange(logits.shape[-1]) == 7)

    with lm.hooks(fwd_hooks=[("unembed.hook_out", push_to_token_7)]):
        assert isinstance(make_decoder(lm, prompt_ids, prompt_mask, 4), TransformerLensCacheDecoder), \
            "the static forward skips hook points: a hooked model must decode through TransformerLens"
        ids, _ = generate(lm, prompt_ids, prompt_mask, 4, top_k=1)
    assert (ids == 7).all(), "the hook did not act on the samples"
    with pytest.raises(ValueError, match="hooks attached"), lm.hooks(fwd_hooks=[("unembed.hook_out", push_to_token_7)]):
        make_decoder(lm, prompt_ids, prompt_mask, 4, kv_cache="static")


def test_an_alibi_model_falls_back_to_transformer_lens_with_the_reason(lm):
    from transformer_lens import HookedTransformer, HookedTransformerConfig

    cfg = HookedTransformerConfig(n_layers=2, d_model=32, n_ctx=64, d_head=8, n_heads=4, d_mlp=64,
                                  d_vocab=lm.cfg.d_vocab, act_fn="gelu_new", normalization_type="LN",
                                  positional_embedding_type="alibi", seed=0)
    alibi = HookedTransformer(cfg, tokenizer=lm.tokenizer).eval()  # ALiBi: its bias is not written out
    assert "alibi" in unsupported_reason(alibi)
    prompt_ids, prompt_mask = tokenize_prompts(alibi, PROMPTS, prepend_bos=True)
    assert isinstance(make_decoder(alibi, prompt_ids, prompt_mask, 5), TransformerLensCacheDecoder)
    torch.manual_seed(2)
    auto = generate(alibi, prompt_ids, prompt_mask, 5, top_k=10)
    torch.manual_seed(2)
    tl = generate(alibi, prompt_ids, prompt_mask, 5, top_k=10, kv_cache="transformer_lens")
    assert torch.equal(auto[0], tl[0]) and torch.equal(auto[1], tl[1])
    with pytest.raises(ValueError, match="kv_cache='static' cannot run this model: positional_embedding_type='alibi'"):
        generate(alibi, prompt_ids, prompt_mask, 5, kv_cache="static")


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: the CUDA-graph decode step")
def test_cuda_graph_decode_step_replays_the_uncaptured_step():
    """On CUDA the decode step is captured once and replayed: the replayed logits are those of the
    uncaptured step and of TransformerLens' full forward, and sampling gives the same tokens."""
    lm = load_lm("tiny").to("cuda").eval()
    prompt_ids, prompt_mask = (t.to("cuda") for t in tokenize_prompts(lm, PROMPTS, prepend_bos=True))
    completion = torch.randint(1, lm.cfg.d_vocab, (len(PROMPTS), 7), device="cuda")
    graphed, decoder = static_logits_step_by_step(lm, prompt_ids, prompt_mask, completion, cuda_graph=True)
    assert decoder.graph is not None, "the step was not captured"
    eager, _ = static_logits_step_by_step(lm, prompt_ids, prompt_mask, completion, cuda_graph=False)
    assert (graphed - eager).abs().max().item() <= 1e-5
    assert (graphed - full_forward_logits(lm, prompt_ids, prompt_mask, completion)).abs().max().item() <= 1e-4
    out = []
    for cuda_graph in (True, False):
        torch.manual_seed(3)
        out.append(generate(lm, prompt_ids, prompt_mask, 12, top_k=10, stop_at_eos=True, cuda_graph=cuda_graph))
    assert torch.equal(out[0][0], out[1][0]) and torch.equal(out[0][1], out[1][1])


CUDA = pytest.param("cuda", marks=[pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(),
                                                                         reason="needs CUDA: the reused CUDA graph")])


@pytest.mark.parametrize("sample_in_graph", [False, True])
@pytest.mark.parametrize("device", ["cpu", CUDA])
def test_a_reused_static_decoder_samples_as_a_fresh_one_after_the_weights_change(device, sample_in_graph):
    """`DecoderCache` keeps one decoder between calls of a shape (a trainer's rollouts): after the
    weights move and with a new batch of prompts, its tokens are a fresh decoder's, draw for draw —
    a stale weight layout, a stale prompt mask or a column not reset would change them. On CUDA the
    reused decoder replays the graph captured on the first call; the fresh one runs uncaptured and
    samples outside it. With `sample_in_graph` the reused decoder's sampling loop is kept too (its
    step counter, completion and finished rows reset each call; on CUDA the draw inside the graph)."""
    from rlhf_scratch.models.static_cache import DecoderCache

    model = load_lm("tiny").to(device).eval()
    decoders = DecoderCache()
    batches = [[t.to(device) for t in tokenize_prompts(model, prompts, prepend_bos=True)]
               for prompts in (PROMPTS, [PROMPTS[2], PROMPTS[0], "B"])]
    assert batches[0][0].shape == batches[1][0].shape and not torch.equal(batches[0][1], batches[1][1])
    first = None
    for step, (prompt_ids, prompt_mask) in enumerate(batches * 2):
        with torch.no_grad():
            model.blocks[1].attn.W_Q.mul_(1.5 if step else 1.0)  # the policy moved between rollouts
            model.unembed.W_U.add_(0.01 * step)
        out = []
        for cache in (decoders, None):
            torch.manual_seed(10 + step)
            out.append(generate(model, prompt_ids, prompt_mask, 9, top_k=10, decoders=cache, cuda_graph=cache is not None,
                                sample_in_graph=sample_in_graph and cache is not None))
        assert torch.equal(out[0][0], out[1][0]), f"call {step}: the reused decoder sampled other tokens"
        first = decoders.decoder if first is None else first
        assert decoders.decoder is first, "the same shape must reuse the decoder"
    if sample_in_graph:
        assert first.sampling is not None and first.sampling.t.item() == 9, "the kept sampling loop did not run"
    if device == "cuda":
        assert (first.sampling.graph if sample_in_graph else first.graph) is not None, "the reused decoder's step was not captured"
    longer = [t.to(device) for t in tokenize_prompts(model, ["a much longer prompt than any of the others in this test"] * 3, prepend_bos=True)]
    generate(model, *longer, 9, decoders=decoders)
    assert decoders.decoder is not first, "a new shape needs a new decoder"


def host_read_counter():
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("host_reads", Path(__file__).resolve().parents[2] / "benchmarks" / "host_reads.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.HostReadCounter()


@pytest.mark.parametrize("top_k, top_p", [(10, 1.0), (0, 0.9)])
def test_the_loop_over_static_buffers_samples_the_eager_loops_tokens_and_reads_nothing_back(lm, top_k, top_p):
    """`sample_in_graph=True` (the loop a CUDA graph captures, run uncaptured here): the eager loop's
    tokens and masks under one seed, rows stopping at different steps, with no read of a tensor's
    value into Python; the eager loop reads "has every row ended?" each step on a CPU. The stop token
    is one row 0 draws at step 2, so rows end at different steps (a mask written at t + 1, a stop
    checked before the write, or `finished` never set would differ)."""
    prompt_ids, prompt_mask = tokenize_prompts(lm, PROMPTS, prepend_bos=True)
    torch.manual_seed(5)
    free, _ = generate(lm, prompt_ids, prompt_mask, 10, temperature=0.9, top_k=top_k, top_p=top_p)
    stop = (int(free[0, 2]),)
    out, reads = [], []
    for in_graph in (False, True):
        torch.manual_seed(5)
        with host_read_counter() as counter:
            out.append(generate(lm, prompt_ids, prompt_mask, 10, temperature=0.9, top_k=top_k, top_p=top_p,
                                stop_at_eos=True, stop_ids=stop, sample_in_graph=in_graph))
        reads.append(counter.total)
    (eager_ids, eager_mask), (ids, mask) = out
    assert torch.equal(ids, eager_ids) and torch.equal(mask, eager_mask), f"{ids.tolist()}\n{eager_ids.tolist()}"
    first = int((ids[0] == stop[0]).nonzero()[0])
    assert first <= 2 and mask[0].tolist() == [True] * (first + 1) + [False] * (9 - first), "row 0 ends at its stop token"
    assert len(set(mask.sum(dim=1).tolist())) > 1, f"rows should end at different steps: {mask.sum(dim=1).tolist()}"
    assert (ids[~mask] == pad_token_id(lm)).all(), "a row that ended is fed and shows the pad token"
    assert reads[1] == 0, f"the loop over static buffers read the device {reads[1]} times"
    assert reads[0] >= 3, "the eager loop checks every step on a CPU (the counter must see it)"


def test_decode_weights_are_views_of_the_parameters_and_the_stacked_qkv_is_rewritten_in_place(tiny_random_lm):
    """W_O and W_U are read where they lie (no copy, always current); [W_Q; W_K; W_V] is one kept
    matrix rewritten in place by `refresh`; a LoRA'd W_O (computed on read) is copied over. Each is
    checked against a fresh layout after the weights move."""
    from rlhf_scratch.models.lora import add_lora
    from rlhf_scratch.models.static_cache import DecodeWeights

    model = tiny_random_lm
    weights = DecodeWeights.of(model)
    assert weights.W_U_T.data_ptr() == model.unembed.W_U.data_ptr()
    assert weights.W_O[1].data_ptr() == model.blocks[1].attn.W_O.data_ptr()
    kept = [w.data_ptr() for w in weights.W_QKV]
    with torch.no_grad():
        model.blocks[1].attn.W_K.mul_(-2.0)
        model.blocks[0].attn.b_V.add_(0.5)
        model.unembed.W_U.add_(0.25)
    weights.refresh(model)
    fresh = DecodeWeights.of(model)
    assert [w.data_ptr() for w in weights.W_QKV] == kept, "refresh must write into the same tensors"
    for name in ("W_QKV", "b_QKV", "W_O"):
        for layer, (a, b) in enumerate(zip(getattr(weights, name), getattr(fresh, name))):
            assert torch.equal(a, b), f"{name}[{layer}] is stale after refresh"
    assert torch.equal(weights.W_U_T, fresh.W_U_T)
    q, k = model.blocks[1].attn.W_Q, model.blocks[1].attn.W_K  # [h, m, d]: row (h d) of the stack is W[h, :, d]
    assert torch.equal(weights.W_QKV[1][5], q[1, :, 1]) and torch.equal(weights.W_QKV[1][16 + 6], k[1, :, 2])

    add_lora(model, rank=2, alpha=4.0, targets=("W_O",))
    weights = DecodeWeights.of(model)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora" in name.lower() or name.endswith((".A", ".B")):
                p.add_(0.1)
    weights.refresh(model)
    assert torch.equal(weights.W_O[0], DecodeWeights.of(model).W_O[0]), "a LoRA'd W_O must be copied over"
    assert not torch.equal(weights.W_O[0], model.blocks[0].attn.parametrizations.W_O.original.reshape(-1, 16).T)
    # made while the adapters were off, the layout holds the frozen base weight's value, not a view of it:
    # refreshed with them on, it takes W + ΔW and the base weight stays as it was (a view would be written)
    from rlhf_scratch.models.lora import adapters_off

    base = model.blocks[0].attn.parametrizations.W_O.original.detach().clone()
    with adapters_off(model):
        off = DecodeWeights.of(model)
    assert torch.equal(off.W_O[0], base.reshape(-1, 16).T)
    off.refresh(model)
    assert torch.equal(model.blocks[0].attn.parametrizations.W_O.original, base), "refresh wrote into the frozen base weight"
    assert torch.equal(off.W_O[0], DecodeWeights.of(model).W_O[0])


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: the draw inside the CUDA graph")
def test_on_cuda_sampling_inside_the_graph_draws_the_eager_tokens(monkeypatch):
    """The check `sampling.GRAPHED_SAMPLING_CHECKED` waits for: with it set, a CUDA rollout samples
    inside the decode step's graph (the default path it switches on) and draws the eager loop's tokens
    and masks under one seed, call after call with the graph kept, rows stopping early, and leaves the
    CUDA generator where the eager loop leaves it (without early stopping: the eager loop stops
    drawing once every row has ended, the graphed one draws gen_len steps)."""
    from rlhf_scratch.models.static_cache import DecoderCache
    from rlhf_scratch.rollout import sampling

    monkeypatch.setattr(sampling, "GRAPHED_SAMPLING_CHECKED", True)
    lm = load_lm("tiny").to("cuda").eval()
    prompt_ids, prompt_mask = (t.to("cuda") for t in tokenize_prompts(lm, PROMPTS, prepend_bos=True))
    decoders = DecoderCache()
    for call, (stop_at_eos, top_p) in enumerate([(False, 1.0), (True, 1.0), (True, 0.9), (False, 0.9)]):
        out, states = [], []
        for graphed in (True, False):
            torch.manual_seed(20 + call)
            out.append(generate(lm, prompt_ids, prompt_mask, 16, temperature=1.2, top_k=0 if top_p < 1 else 10, top_p=top_p,
                                stop_at_eos=stop_at_eos, decoders=decoders if graphed else None,
                                cuda_graph=graphed, sample_in_graph=None if graphed else False))
            states.append(torch.cuda.get_rng_state())
        assert decoders.decoder.sampling is not None and decoders.decoder.sampling.graph is not None, "not sampled in the graph"
        assert torch.equal(out[0][0], out[1][0]) and torch.equal(out[0][1], out[1][1]), f"call {call}: other tokens"
        if not stop_at_eos:
            assert torch.equal(states[0], states[1]), f"call {call}: the graph drew other random numbers"
