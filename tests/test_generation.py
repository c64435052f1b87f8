"""Sampling and scoring over left-padded prompts: padding changes nothing, EOS ends a completion,
top-k draws only among the k largest logits."""

import math

import pytest
import torch

from rlhf_scratch.generation import generate, get_samples, sample_next_token, tokenize_prompts
from rlhf_scratch.loading import load_lm
from rlhf_scratch.model import TransformerWithValueHead
from rlhf_scratch.objectives import generated_span
from rlhf_scratch.rollout import score_tokens

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


def test_greedy_generation_with_padding_and_cache_matches_each_prompt_alone(lm):
    """top_k = 1 is greedy: the KV-cached, left-padded loop must pick the same tokens as one prompt alone."""
    prompt_ids, prompt_mask = tokenize_prompts(lm, PROMPTS, prepend_bos=True)
    batch_ids, _ = generate(lm, prompt_ids, prompt_mask, gen_len=8, top_k=1)
    for row, prompt in enumerate(PROMPTS):
        alone = lm.to_tokens(prompt)
        ids, _ = generate(lm, alone, torch.ones_like(alone, dtype=torch.bool), gen_len=8, top_k=1)
        assert torch.equal(batch_ids[row], ids[0]), f"row {row}: padded batch generated different tokens"
        # and against a full forward pass without any cache: each greedy token is the argmax
        full = torch.cat([alone, ids], dim=1)
        argmax = lm(full)[0, alone.shape[1] - 1 : -1].argmax(-1)
        assert torch.equal(argmax, ids[0]), "the KV cache changed the model's prediction"


def test_stop_at_eos_masks_everything_after_the_first_eos():
    lm = load_lm("tiny").eval()
    eos = lm.tokenizer.eos_token_id
    with torch.no_grad():
        lm.unembed.b_U[eos] += 100.0  # EOS is now certain at every step
    prompt_ids, prompt_mask = tokenize_prompts(lm, PROMPTS[:2], prepend_bos=True)
    ids, mask = generate(lm, prompt_ids, prompt_mask, gen_len=5, top_k=10, stop_at_eos=True)
    assert mask.tolist() == [[True, False, False, False, False]] * 2, "only the EOS itself is kept"
    assert ids[:, 0].tolist() == [eos, eos]
    ids, mask = generate(lm, prompt_ids, prompt_mask, gen_len=5, top_k=10, stop_at_eos=False)
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
    from rlhf_scratch.rollout import make_rollout, policy_sequence_log_probs

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
            now = policy_sequence_log_probs(lm, rollout, torch.arange(len(rollout)))
        torch.testing.assert_close(now, rollout.logprobs.sum(-1), atol=1e-4, rtol=0)
    finally:
        lm.load_state_dict(load_lm("tiny").state_dict())
