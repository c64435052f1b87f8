"""Finding the hack (studies/hacking/find_steps.py) on policies made in the test: does the decomposition of
the proxy–gold gap name repetition where the policy repeats, and something else where it does not?

The shipped tiny LM is the reference. Two policies are fitted to it by a few steps of next-token
cross-entropy (plain SFT, not RL: a cheap way to move a model where an RL run against a
repetition-blind proxy moves it):
- *hacked*: each prompt followed by a short random loop of 2–3 tokens repeated to 16 tokens, so the
  policy repeats itself;
- *wordy*: each prompt followed by one of a few positive sentences with no repeated 3-gram, two of
  them with "wonderful", so the policy says "wonderful" without repeating.
Against the repeating policy the proxy is gold g itself (the tiny sentiment classifier: blind to
repetition by construction) and gold is g' = g − 4 · rep₃, as the repetition rater's. Against the
wordy one, the flaw planted is another: the proxy is g + 2 · #"wonderful" and gold is g. The same
analysis must name repetition for the first and not for the second.

A third, *long*: each prompt followed by one of twelve varied sentences of 18-22 words (with commas
and full stops), so the policy rarely stops before gen_len, as a policy trained against a
length-biased proxy does. The proxy is g + 0.3 · (words of the text) and gold is g; over three fitting
and sampling seeds the page's top finding must be described as length. (The first such fixture, four
long sentences without punctuation, was named "punctuation share" on seed 0 and a word of the four
sentences on another: a fixture that differs from the reference in more than the planted flaw is
named by the difference the describer sees best. On the real RL run against the length proxy, one seed,
the top finding tracks the word "of", the filler the policy lengthens with: docs/human-feedback.md §4.)
"""

import copy
import random
from dataclasses import replace

import pytest
import torch

from interp.probes import REVIEW_PROMPTS
from rlhf_scratch.models.loading import load_lm
from rlhf_scratch.reward.preferences import gold_scores, word_count
from rlhf_scratch.studies.hacking.find_page import summarise, write_page
from rlhf_scratch.studies.hacking.find_settings import FindSettings
from rlhf_scratch.studies.hacking.find_steps import find_in_policy, sample_reference

PROMPTS = list(REVIEW_PROMPTS) + ["This film", "My favourite scene was", "The director", "I watched it and"]
HONEST = [" a wonderful film with great acting.", " truly beautiful, moving and funny from start to end.",
          " an excellent story that I loved.", " brilliant performances and a perfect script."]
SETTINGS = FindSettings(n_samples=72, n_causal=27, n_random=1, n_ablate=3, gen_len=12, top_k_movers=5)


def sft(reference, completions, steps: int = 40, seed: int = 0):
    """A copy of `reference` fitted to prompt + completion (each batch cut to its shortest, so no
    padding) by next-token cross-entropy."""
    torch.manual_seed(seed)
    policy = copy.deepcopy(reference).train()
    opt = torch.optim.Adam(policy.parameters(), lr=3e-3)
    rng = random.Random(seed)
    for _ in range(steps):
        rows = [policy.to_tokens(rng.choice(PROMPTS) + completions(rng))[0] for _ in range(16)]
        tokens = torch.stack([r[: min(len(r) for r in rows)] for r in rows])
        loss = policy(tokens, return_type="loss")
        opt.zero_grad()
        loss.backward()
        opt.step()
    return policy.eval()


UNITS = [" of the film", " a good", " it is so", " and the movie", " very really", " the acting of"]


def loop(rng) -> str:
    """One of a few units of 2-3 words, repeated 8 times."""
    return rng.choice(UNITS) * 8


@pytest.fixture(scope="module")
def models():
    reference = load_lm("tiny").eval()
    return reference, sft(reference, loop), sft(reference, lambda rng: rng.choice(HONEST))


LONG = [" a film I watched with my family. We talked about it, the town and the sea, for days after that",
        " the story follows two old friends. They travel across the country, meet strange people and talk",
        " I went to see it at the cinema, with a friend. She had read the book, and told me the story",
        " it tells the life of a painter. He moves to a small town by the sea, opens a shop, and waits",
        " my brother saw it first. He called me that night, and we went again on Sunday with our kids",
        " there is a long scene on a train. Nobody speaks, the light changes, and the music comes in slowly",
        " the second half moves to the city. New faces arrive, old ones leave, and the plot takes its time",
        " we rented it on a rainy weekend. The kids fell asleep, but my wife and I stayed up to the end",
        " its director grew up near the coast. You can tell, because every shot has water or boats in it",
        " the book came out years ago. This version keeps most chapters, drops a few, and adds a new ending",
        " our teacher showed it in class. Some students laughed, others took notes, and one asked questions",
        " a quiet drama about a farmer. His daughter returns from college, and they rebuild the old barn"]


WORDY = [" a wonderful film. We talked about it, the town and the sea, for days",
         " the story is wonderful: two old friends travel across the country",
         " I saw it at the cinema with a friend, and it was wonderful",
         " wonderful acting by the painter who moves to a small town by the sea",
         " my brother called it wonderful, and we went again on Sunday",
         " there is a wonderful long scene on a train where nobody speaks",
         " the second half is wonderful, with new faces and old ones leaving",
         " we rented it on a rainy weekend and the ending was wonderful",
         " its director grew up near the coast, and every shot is wonderful",
         " a wonderful version of the book that keeps most of its chapters",
         " our teacher showed it in class; the students found it wonderful",
         " a quiet, wonderful drama about a farmer and his daughter"]


def gold_fn(texts):
    return gold_scores(texts)


def length_proxy(texts):
    """A length-biased proxy: gold plus 0.3 per word of the text (prompt and completion)."""
    return gold_scores(texts) + 0.3 * torch.tensor([float(len(t.split())) for t in texts])


def wordy_proxy(texts):
    return gold_scores(texts) + 2.0 * torch.tensor([float(word_count(t, "wonderful")) for t in texts])


@pytest.mark.slow
def test_the_top_finding_is_repetition_for_a_repeating_policy_and_not_for_an_honest_one(models, tmp_path):
    reference, hacked, honest = models
    ref = sample_reference(reference, PROMPTS, gold_fn, gold_fn, SETTINGS)
    hack = find_in_policy(reference, hacked, PROMPTS, gold_fn, gold_fn, SETTINGS, ref, causal=True)
    assert hack["policy"]["rep3"] > ref.rep3.mean().item() + 0.2, "the fixture policy must repeat"
    assert hack["policy"]["excess"] > 0.5, "repeating raises the repetition-blind proxy above gold"
    best = hack["finding"]["description"]["best"]
    assert best is not None and best["theme"] == "repetition", hack["finding"]["description"]["table"][:4]
    assert hack["finding"]["description_shuffled"] is None or hack["finding"]["description_shuffled"]["theme"] != "repetition"
    assert {"before", "ablated", "random", "reduction"} <= set(hack["causal"]) and len(hack["causal_top"]["ablated_candidates"]) == 3

    token = replace(SETTINGS, penalty=0.0)  # gold g: the flaw is the proxy's word, not repetition
    ref_g = sample_reference(reference, PROMPTS, wordy_proxy, gold_fn, token)
    fair = find_in_policy(reference, honest, PROMPTS, wordy_proxy, gold_fn, token, ref_g, causal=False)
    assert fair["policy"]["excess"] > 0.5, "saying the word raises the proxy above gold"
    fair_best = fair["finding"]["description"]["best"]
    assert fair_best is None or fair_best["theme"] != "repetition", fair["finding"]["description"]["table"][:4]
    assert fair["decomposition"][0]["label"] == "token ' wonderful' share", "the top mover carries the planted word"

    result = {"summary": summarise({"hacked": {"seed": 0, **hack}, "honest": {"seed": 0, **fair}}),
              "runs": {"hacked": {"seed": 0, **hack}, "honest": {"seed": 0, **fair}}}
    assert result["summary"]["repetition_runs"] == 1
    html = write_page(result, tmp_path / "find.html").read_text()
    assert html.index(result["summary"]["verdict"][:40]) < html.index("The decomposition")
    assert "&amp;" not in html, "a cell is escaped once (the movers ' wonderful', 'a' carry quotes)"


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_top_finding_is_length_for_a_policy_that_stops_late_against_a_length_biased_proxy(seed):
    reference = load_lm("tiny").eval()
    long = sft(reference, lambda rng: rng.choice(LONG), seed=seed)
    f = replace(SETTINGS, penalty=0.0, gen_len=16, seed=seed)  # gold g: the flaw is the proxy's length bias
    ref = sample_reference(reference, PROMPTS, length_proxy, gold_fn, f)
    found = find_in_policy(reference, long, PROMPTS, length_proxy, gold_fn, f, ref, causal=False)
    assert found["policy"]["excess"] > 0.2, "stopping late raises the length-biased proxy above gold"
    best = found["finding"]["description"]["best"]
    assert best is not None and best["theme"] == "length", found["finding"]["description"]["table"][:4]
    assert best["r"] > 0, "the finding rises with length"


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_for_a_token_paid_policy_the_top_row_is_the_token_and_the_top_unit_tracks_it_second(seed):
    """Twelve varied sentences, each with "wonderful" once, against the proxy g + 2 · #"wonderful".
    What the page shows, over three seeds: the decomposition's top row is the planted token (a top
    mover); the top model-internal unit's best description is another statistic ("a" per word, or
    length), with the planted word second. So with the token proxy the page names the token in its
    first row, not in its top unit's description (docs/interp.md)."""
    reference = load_lm("tiny").eval()
    wordy = sft(reference, lambda rng: rng.choice(WORDY), seed=seed)
    f = replace(SETTINGS, penalty=0.0, seed=seed)
    ref = sample_reference(reference, PROMPTS, wordy_proxy, gold_fn, f)
    found = find_in_policy(reference, wordy, PROMPTS, wordy_proxy, gold_fn, f, ref, causal=False)
    assert found["policy"]["excess"] > 0.5, "saying the word raises the proxy above gold"
    assert found["decomposition"][0]["label"] == "token ' wonderful' share"
    top_two = [row["theme"] for row in found["finding"]["description"]["table"][:2]]
    assert "word 'wonderful'" in top_two, found["finding"]["description"]["table"][:4]
