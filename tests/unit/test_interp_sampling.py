"""interp.sampling: left-padded prompts, hooks in place, EOS, and the reward and KL of samples, on known answers.

The known answers come from a model whose unembedding bias is raised by 100 on one token: it
emits that token with probability 1 − e^-90 or so, whatever the prompt, so the samples are known
in advance and each one's log-probability under the reference can be computed prompt by prompt,
unpadded, without the sampler's padding and masks.
"""

import copy

import pytest
import torch

from interp.sampling import (
    SampleSettings,
    completion_logprobs,
    completion_texts,
    left_padded,
    sample,
    sampled_reward_and_kl,
)
from interp.toy import toy_model, toy_tokenizer

pytestmark = pytest.mark.usefixtures("one_thread")

PROMPTS = ["This movie was", "I thought this film was really"]  # different lengths: the batch is padded


@pytest.fixture(scope="module")
def model():
    return toy_model(seed=0, tokenizer=toy_tokenizer())


def forcing(model, word: str):
    """A copy of `model` that (almost surely) always says `word` next."""
    forced = copy.deepcopy(model)
    with torch.no_grad():
        forced.unembed.b_U[model.to_single_token(word)] += 100.0
    return forced


def test_left_padding_is_exact_at_the_last_column(model):
    ids, mask = left_padded(model, PROMPTS)
    assert mask.sum(1).tolist() == [len(model.to_tokens(p)[0]) for p in PROMPTS]
    assert bool(mask[:, -1].all()), "every row ends at the last column, where the next token is drawn"
    with torch.no_grad():
        batched = model(ids, attention_mask=mask.long())[:, -1]
        single = torch.cat([model(model.to_tokens(p))[:, -1] for p in PROMPTS])
    torch.testing.assert_close(batched, single, atol=1e-4, rtol=1e-4)


def test_sampling_is_seeded_cycles_the_prompts_and_runs_the_hooks(model):
    s = SampleSettings(n_samples=5, gen_len=4, seed=3)
    a, b = sample(model, PROMPTS, s), sample(model, PROMPTS, s)
    assert a.prompts == [PROMPTS[i % 2] for i in range(5)]
    assert torch.equal(a.completion_ids, b.completion_ids) and bool(a.completion_mask.all())
    calls = []
    sample(model, PROMPTS, s, [("blocks.0.hook_resid_post", lambda x, hook: calls.append(x.shape[1]))])
    width = a.prompt_ids.shape[1]
    assert calls == [width, width + 1, width + 2, width + 3], "no KV cache: each step reads the whole sequence"


def test_a_forced_token_gives_the_reward_and_kl_worked_out_prompt_by_prompt(model):
    """Every completion is " good good good", so a reward counting " good" is exactly 3 with no spread,
    and the sampled KL is Σ_t log p_forced − log p_ref ≈ −Σ_t log p_ref(" good" | prompt, " good"·t),
    computed here on each prompt alone (no padding, no masks). Red if the log-probs are read one
    position off, or the left padding or its attention mask leaks into the real positions."""
    forced = forcing(model, " good")
    s = SampleSettings(n_samples=4, gen_len=3, seed=0)
    seen = []

    def count_good(texts):
        seen.extend(texts)
        return [t.count(" good") for t in texts]

    reward, se, kl = sampled_reward_and_kl(forced, model, PROMPTS, count_good, s)
    assert seen == [PROMPTS[i % 2] + " good good good" for i in range(4)], "the reward reads prompt + completion"
    assert reward == 3.0 and se == 0.0
    good = model.to_single_token(" good")
    expected = []
    with torch.no_grad():
        for prompt in seen:
            tokens = model.to_tokens(prompt)  # BOS, the prompt, then the three " good"
            logp = model(tokens).log_softmax(-1)[0, -4:-1, good]
            expected.append(-logp.sum().item())
    assert kl == pytest.approx(sum(expected) / len(expected), abs=1e-3)
    assert sampled_reward_and_kl(model, model, PROMPTS, count_good, s)[2] == 0.0, "a model's KL to itself is 0"


def test_stop_at_eos_masks_what_follows_and_leaves_it_out_of_the_text(model):
    forced = forcing(model, "<|endoftext|>")
    s = SampleSettings(n_samples=2, gen_len=4, stop_at_eos=True)
    out = sample(forced, PROMPTS, s)
    assert out.completion_mask.tolist() == [[True, False, False, False]] * 2
    assert completion_texts(forced, out, stop_at_eos=True) == ["", ""]
    whole = completion_logprobs(forced, out.prompt_ids, out.prompt_mask, out.completion_ids, out.completion_mask)
    first = completion_logprobs(forced, out.prompt_ids, out.prompt_mask, out.completion_ids[:, :1], out.completion_mask[:, :1])
    torch.testing.assert_close(whole, first, msg="masked tokens add nothing to the log-prob")
