"""The discovery exercise of exercises 05 (`check_changed_head_scores`): the planted pairs are what they say
(one head trained, a decoy whose weights moved and whose function did not), and the check names the tempting
wrong answers — the decoy a weight diff finds, the base model's largest head, a head one layer off, the right
head on evidence that does not decide it — without printing the right one.

The generic tests (the solution passes, no mistake gives the answer, the notebook is the generator's) are in
test_course_checks.py.
"""

import copy

import pytest
import torch

from rlhf_scratch.course import check_changed_head_scores, checks_discovery
from rlhf_scratch.course import mystery as mystery_module
from rlhf_scratch.course.mystery import PLANTS, PROMPTS, mystery
from rlhf_scratch.course.solutions_interp import changed_head_scores


def fails_with(name: str, bug, phrase: str) -> str:
    """The check's AssertionError on `bug`, asserted to contain `phrase`."""
    assert name == "changed_head_scores"
    with pytest.raises(AssertionError) as err:
        check_changed_head_scores(bug)
    assert phrase in str(err.value), f"check_{name} on {bug.__name__} said:\n{err.value}\nexpected {phrase!r}"
    return str(err.value)


def head_sizes(model) -> torch.Tensor:
    """[layer, head]: √(Σ ‖W‖²_F) over W_Q, W_K, W_V, W_O."""
    return torch.stack([getattr(model, w).norm(dim=(-2, -1)) ** 2 for w in ("W_Q", "W_K", "W_V", "W_O")]).sum(0).sqrt()


# --- the planted pairs ------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["A", "B"])
def test_the_run_moved_the_metric_through_the_trained_head_alone(which):
    """The gap is over half a nat, and patching the trained head's output alone recovers all of it (1e-4):
    the run's gradient reached that head only. Building leaves torch's global RNG as it was."""
    state = torch.get_rng_state()
    m = mystery_module.build(PLANTS["AB".index(which)])
    assert torch.equal(torch.get_rng_state(), state)
    layer, head = PLANTS["AB".index(which)].trained
    with torch.no_grad():
        gap = (m.metric(m.tuned(m.tokens)) - m.metric(m.reference(m.tokens))).item()
        assert gap > 0.5
        effects = changed_head_scores(m.reference, m.tuned, m.tokens, m.metric).mean(0)
    assert effects[layer, head].item() == pytest.approx(gap, abs=1e-4)


@pytest.mark.parametrize("which", ["A", "B"])
def test_the_decoy_changes_weights_not_the_function(which):
    """The decoy rotated alone leaves every logit as it was (1e-5), yet a weight diff of the pair names the
    decoy, not the trained head: the trap is real."""
    from interp.attention import head_weight_change

    plant, m = PLANTS["AB".index(which)], mystery(which)
    rotated = copy.deepcopy(m.reference)
    mystery_module.rotate_head(rotated, plant.decoy, seed=99)
    with torch.no_grad():
        assert torch.allclose(rotated(m.tokens), m.reference(m.tokens), atol=1e-5)
    change = head_weight_change(m.reference, m.tuned)["all"]
    assert change[plant.decoy] > 1.5 * change[plant.trained] > 0


@pytest.mark.parametrize("which", ["A", "B"])
def test_the_known_wrong_answers_are_distinct_heads(which):
    """The trained head, the decoy, the largest head of the base and the heads one layer off are different
    heads, so each wrong answer is named as itself (A has all four kinds; B's trained head is in the last layer)."""
    plant = PLANTS["AB".index(which)]
    traps = checks_discovery._traps(which)
    assert plant.trained not in traps
    assert sorted(traps.values()) == ([1, 2, 3, 4] if which == "A" else [1, 2, 4])
    size = head_sizes(mystery(which).reference)
    assert [h for h, code in traps.items() if code == 2] == [divmod(int(size.flatten().argmax()), 4)]


# --- the check names each wrong answer --------------------------------------------------------


def by_weight_change(reference, tuned, tokens, metric):
    """The size of each head's weight change (the same for every prompt)."""
    from interp.attention import head_weight_change

    return head_weight_change(reference, tuned)["all"].expand(tokens.shape[0], -1, -1).clone()


def by_size_of_the_base(reference, tuned, tokens, metric):
    """The largest head of the reference."""
    return head_sizes(reference).expand(tokens.shape[0], -1, -1).clone()


def one_layer_late(reference, tuned, tokens, metric):
    """The right scores, each layer's put at the next (an index off by one)."""
    return changed_head_scores(reference, tuned, tokens, metric).roll(1, dims=1)


def one_layer_early(reference, tuned, tokens, metric):
    return changed_head_scores(reference, tuned, tokens, metric).roll(-1, dims=1)


def undecided(reference, tuned, tokens, metric):
    """The trained head first on average by 0.05, but ±5 from prompt to prompt."""
    which = "A" if torch.equal(tokens, mystery("A").tokens) else "B"
    layer, head = PLANTS["AB".index(which)].trained
    scores = torch.zeros(tokens.shape[0], 3, 4)
    scores[:, layer, head] = 0.05 + 5.0 * torch.tensor([1.0, -1.0]).repeat(tokens.shape[0] // 2)
    return scores


def per_head_only(reference, tuned, tokens, metric):
    """One score per head, not per prompt."""
    return changed_head_scores(reference, tuned, tokens, metric).mean(0)


def test_a_weight_diff_is_named_as_the_decoy_and_the_answer_stays_hidden():
    said = fails_with("changed_head_scores", by_weight_change, "head's weights moved, but what it computes did not")
    assert "got      [0.0, 1.0, 1.0]" in said and "expected [1.0, 1.0, 0.0]" in said  # codes, not the head
    layer, head = PLANTS[0].trained
    assert f"{layer}.{head}" not in said and f"[{layer}, {head}" not in said


def test_the_largest_head_of_the_base_model_is_named():
    fails_with("changed_head_scores", by_size_of_the_base, "the base model's LARGEST head")


def test_a_head_one_layer_off_is_named_either_way():
    fails_with("changed_head_scores", one_layer_late, "one layer AFTER the head the run changed")
    fails_with("changed_head_scores", one_layer_early, "one layer BEFORE the head the run changed")


def test_the_right_head_on_undecided_evidence_does_not_pass():
    fails_with("changed_head_scores", undecided, "do not decide it over the prompts")


def test_scores_without_a_prompt_axis_are_refused_in_one_line():
    fails_with("changed_head_scores", per_head_only, f"shape [prompt, layer, head] = [{PROMPTS}, 3, 4]")


def test_the_report_gives_the_margin_and_its_interval():
    """The solution: the trained head beats the runner-up by 1.33 nats on A and 1.11 on B (docs/interp.md quotes
    them), decided; a paired interval by hand on made-up scores: d = [3, 1, 2] → 2 ± t_{0.975, 2} · 1/√3 = 2 ± 2.484."""
    for plant, which, margin in ((PLANTS[0], "A", 1.33), (PLANTS[1], "B", 1.11)):
        m = mystery(which)
        e = checks_discovery.discovery_evidence(changed_head_scores(m.reference, m.tuned, m.tokens, m.metric))
        assert e.head == plant.trained and e.decided and e.n == PROMPTS
        assert e.margin == pytest.approx(margin, abs=0.005)
    scores = torch.zeros(3, 2, 2)
    scores[:, 1, 0] = torch.tensor([4.0, 2.0, 3.0])
    scores[:, 0, 1] = torch.tensor([1.0, 1.0, 1.0])
    e = checks_discovery.discovery_evidence(scores)
    assert (e.head, e.runner_up) == ((1, 0), (0, 1))
    assert (e.margin, e.low, e.high) == pytest.approx((2.0, 2.0 - 2.4841377, 2.0 + 2.4841377), abs=1e-6)
    assert e.decided is False
    assert "NOT resolved" in checks_discovery.discovery_report(scores)


def test_the_t_quantile_the_check_uses_is_students():
    from rlhf_scratch.studies.stats import t_quantile

    for df in (1, 2, 4, 15):
        assert checks_discovery.t_975(df) == pytest.approx(t_quantile(0.975, df), abs=1e-9)
    with pytest.raises(ValueError, match="df must be"):
        checks_discovery.t_975(7)
