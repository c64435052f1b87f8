"""What the field added for RLVR (issue 56, item 5), by hand: DAPO's dynamic sampling (verl's
algorithm.filter_groups) drops exactly the groups whose rewards are all equal and samples more, counts
what it did, and fills up at its limit; the soft overlong punishment (verl's reward_model.overlong_buffer,
TRL's get_soft_overlong_punishment) against numbers worked out by hand; their flags refused in one line
where they cannot apply. A short run of each on both backends: tests/integration/test_dynamic_sampling_run.py
and test_controller.py."""

from dataclasses import dataclass

import pytest
import torch

from rlhf_scratch.config import ConfigError, make_args
from rlhf_scratch.controller.options import check_staleness
from rlhf_scratch.core.advantages import group_reward_stats, zero_std_groups
from rlhf_scratch.engine.dataflow import FILTER_GROUPS_METRICS, roll_out_filtered, roll_out_phase
from rlhf_scratch.rollout.groups import concat_rollouts, take_groups
from rlhf_scratch.rollout.phase import OverlongBuffer, Rollout, penalised_rewards, soft_overlong_punishment

# --- which groups have no signal ------------------------------------------------------------------------------


def test_zero_std_groups_marks_exactly_the_groups_whose_values_are_all_equal():
    values = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0])
    assert zero_std_groups(values, 4).tolist() == [False, True, True, False]
    # float dust is not a spread: 0.1 + 0.2 and 0.3 differ in the last bit
    assert zero_std_groups(torch.tensor([0.1 + 0.2, 0.3, 0.5, 0.25]), 2).tolist() == [True, False]
    # TRL's frac_reward_zero_std is their share, from the same definition
    assert group_reward_stats(values, values, 4)["frac_reward_zero_std"] == 0.5


def test_zero_std_groups_refuses_a_batch_that_is_not_whole_groups():
    with pytest.raises(ValueError, match="zero_std_groups: batch of 6 is not a multiple of num_generations 4"):
        zero_std_groups(torch.zeros(6), 4)


# --- a hand-built rollout: groups taken out and put together -------------------------------------------------

PAD, EOS = 0, 9


def rollout_of(prompts: list[str], widths: list[int], G: int = 2, gen_len: int = 3) -> Rollout:
    """G rows per prompt; prompt p is `widths[p]` tokens (its own token ids 10·p+1 …), left-padded to the
    widest; completion row r is [r+1, …, r+1, EOS] (all kept). Not scored yet."""
    width = max(widths)
    ids, mask = [], []
    for p, w in enumerate(widths):
        for _ in range(G):
            ids.append([PAD] * (width - w) + [10 * p + 1 + i for i in range(w)])
            mask.append([False] * (width - w) + [True] * w + [True] * gen_len)
    rows = len(prompts) * G
    return Rollout(prompt_ids=torch.tensor(ids), attention_mask=torch.tensor(mask),
                   completion_ids=torch.tensor([[r + 1] * (gen_len - 1) + [EOS] for r in range(rows)]),
                   completion_mask=torch.ones(rows, gen_len, dtype=torch.bool),
                   prompts=[p for p in prompts for _ in range(G)], completions=[f"c{r}" for r in range(rows)],
                   num_generations=G, eos_token_id=EOS)


def test_take_groups_keeps_each_group_whole_in_the_order_asked():
    rollout = rollout_of(["a", "b", "c"], [1, 2, 3])
    rollout.scores = rollout.rewards = torch.tensor([0.0, 1.0, 2.0, 3.0, 4.0, 5.0])
    taken = take_groups(rollout, [2, 0])
    assert taken.prompts == ["c", "c", "a", "a"] and taken.completions == ["c4", "c5", "c0", "c1"]
    assert taken.rewards.tolist() == [4.0, 5.0, 0.0, 1.0]
    assert taken.completion_ids[:, 0].tolist() == [5, 6, 1, 2]
    assert torch.equal(taken.attention_mask, rollout.attention_mask[[4, 5, 0, 1]])


def test_concat_rollouts_left_pads_the_narrower_prompts_with_their_own_pad():
    one, two = rollout_of(["a"], [2]), rollout_of(["b", "c"], [1, 3])  # widths 2 and 3
    both = concat_rollouts([one, two])
    assert both.prefix_len == 3 and both.prompts == ["a", "a", "b", "b", "c", "c"]
    assert both.prompt_ids[0].tolist() == [PAD, 1, 2]  # one column of padding added on the left
    assert both.attention_mask[0].tolist() == [False, True, True, True, True, True]
    assert torch.equal(both.prompt_ids[2:], two.prompt_ids) and torch.equal(both.attention_mask[2:], two.attention_mask)
    # the completions sit right of the prompt, whatever its width: sample_ids end with them
    assert torch.equal(both.sample_ids[:, 3:], torch.cat([one.completion_ids, two.completion_ids]))


def test_groups_are_chosen_before_the_log_probs():
    rollout = rollout_of(["a"], [1])
    rollout.logprobs = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="take_groups: the rollout has logprobs already; choose groups before compute_log_prob"):
        take_groups(rollout, [0])


# --- dynamic sampling through the roles ------------------------------------------------------------------------


@dataclass
class StubArgs:
    num_generations: int = 2
    max_num_gen_batches: int = 10
    filter_groups_metric: str = "seq_reward"
    algo: str = "grpo"  # a registry name without a critic: no compute_values

    def filters_groups(self) -> bool:
        return True


class StubTrainer:
    """The roles `roll_out_filtered` calls, on hand-built rollouts: prompt q's G rewards are REWARDS[q] (its
    scores SCORES[q]); prompts are drawn P at a time from "q0", "q1", … (the run's prompt iterator)."""

    def __init__(self, rewards: dict[str, list[float]], scores: dict[str, list[float]] | None = None, P: int = 3, **args):
        self.args, self.rewards, self.scores, self.P = StubArgs(**args), rewards, scores or rewards, P
        self.drawn, self.calls = 0, []

    def next_prompts(self) -> list[str]:
        self.drawn += self.P
        return [f"q{i}" for i in range(self.drawn - self.P, self.drawn)]

    def generate_sequences(self, prompts):
        self.calls.append("gen")
        return rollout_of(prompts, [1 + int(p[1:]) % 3 for p in prompts])  # prompt widths 1, 2, 3, 1, …

    def compute_scores(self, rollout):
        self.calls.append("reward")
        rollout.scores = torch.tensor([s for p in rollout.prompts[::2] for s in self.scores[p]])
        rollout.rewards = torch.tensor([r for p in rollout.prompts[::2] for r in self.rewards[p]])
        return rollout

    def compute_ref_log_prob(self, rollout):
        self.calls.append("ref")

    def compute_log_prob(self, rollout, ref_hidden=None):
        self.calls.append("old_log_prob")
        rollout.logprobs = torch.zeros(rollout.completion_ids.shape)
        return rollout


# q1, q2, q4 have all-equal rewards; q0, q3, q5, q6 a spread (asymmetric: a swap of kept and dropped shows)
REWARDS = {"q0": [1.0, 0.0], "q1": [1.0, 1.0], "q2": [0.0, 0.0], "q3": [0.0, 1.0], "q4": [0.5, 0.5],
           "q5": [1.0, 0.5], "q6": [0.0, 1.0], "q7": [0.0, 0.0], "q8": [1.0, 1.0]}


def test_dynamic_sampling_drops_exactly_the_all_equal_groups_and_counts_them():
    trainer = StubTrainer(REWARDS)
    rollout, counts = roll_out_filtered(trainer)
    # batch 1 (q0 q1 q2) keeps q0; batch 2 (q3 q4 q5) keeps q3, q5: full after 2 batches
    assert rollout.prompts == ["q0", "q0", "q3", "q3", "q5", "q5"]
    assert rollout.rewards.tolist() == [1.0, 0.0, 0.0, 1.0, 1.0, 0.5]
    assert counts == {"filter_groups/num_gen_batches": 2.0, "filter_groups/dropped_groups": 3.0,
                      "filter_groups/filled_groups": 0.0}
    assert set(counts) == set(FILTER_GROUPS_METRICS)
    assert trainer.drawn == 6, "the prompt iterator moved by the two batches drawn, no more"
    # generate and reward per batch, then the log-probs once, of the kept rows only (verl's DAPO order)
    assert trainer.calls == ["gen", "reward", "gen", "reward", "ref", "old_log_prob"]
    assert rollout.logprobs.shape == (6, 3) and rollout.prefix_len == 3  # q0 (width 1) padded to q5's 3


def test_kept_groups_beyond_the_batch_are_not_used():
    rollout, counts = roll_out_filtered(StubTrainer(REWARDS, P=2))
    # batches: (q0 q1) keeps q0; (q2 q3) keeps q3 -> full; q4.. never drawn
    assert rollout.prompts == ["q0", "q0", "q3", "q3"]
    assert counts["filter_groups/num_gen_batches"] == 2.0 and counts["filter_groups/dropped_groups"] == 2.0
    rollout, _ = roll_out_filtered(StubTrainer({**REWARDS, "q1": [0.0, 1.0], "q2": [0.0, 1.0]}, P=2))
    assert rollout.prompts == ["q0", "q0", "q1", "q1"], "one batch was enough; nothing else drawn"


def test_at_the_limit_the_batch_is_filled_with_dropped_groups_in_the_order_sampled():
    trainer = StubTrainer(REWARDS, max_num_gen_batches=1)
    rollout, counts = roll_out_filtered(trainer)
    # one batch (q0 q1 q2) only: q0 kept, then q1 and q2 fill the batch
    assert rollout.prompts == ["q0", "q0", "q1", "q1", "q2", "q2"]
    assert counts == {"filter_groups/num_gen_batches": 1.0, "filter_groups/dropped_groups": 0.0,
                      "filter_groups/filled_groups": 2.0}
    rollout, counts = roll_out_filtered(StubTrainer(REWARDS, max_num_gen_batches=2, P=4))
    # (q0 q1 q2 q3) keeps q0 q3; (q4 q5 q6 q7) keeps q5 q6: full at the limit, nothing filled
    assert rollout.prompts[::2] == ["q0", "q3", "q5", "q6"] and counts["filter_groups/filled_groups"] == 0.0
    assert counts["filter_groups/dropped_groups"] == 4.0


def test_no_limit_samples_until_full():
    rewards = {f"q{i}": [0.0, 0.0] for i in range(30)} | {"q25": [1.0, 0.0]}
    rollout, counts = roll_out_filtered(StubTrainer(rewards, max_num_gen_batches=0, P=1))
    assert rollout.prompts == ["q25", "q25"] and counts["filter_groups/num_gen_batches"] == 26.0


def test_the_metric_score_reads_the_reward_functions_scores_not_the_shaped_rewards():
    # q0's scores are equal but a penalty made its rewards differ; q1 the other way round
    scores = {"q0": [1.0, 1.0], "q1": [1.0, 0.0]}
    rewards = {"q0": [1.0, 0.5], "q1": [0.5, 0.5]}
    by_reward, _ = roll_out_filtered(StubTrainer(rewards, scores, P=2, max_num_gen_batches=1))
    by_score, _ = roll_out_filtered(StubTrainer(rewards, scores, P=2, max_num_gen_batches=1, filter_groups_metric="score"))
    assert by_reward.prompts[::2] == ["q0", "q1"] and by_score.prompts[::2] == ["q1", "q0"]


def test_without_filter_groups_the_phase_is_the_plain_rollout():
    trainer = StubTrainer(REWARDS)
    trainer.args.filters_groups = lambda: False
    rollout, counts = roll_out_phase(trainer)
    assert counts == {} and rollout.prompts[::2] == ["q0", "q1", "q2"]  # the all-equal groups stay
    assert trainer.calls == ["gen", "ref", "old_log_prob", "reward"]  # verl's order of the plain phase


# --- the soft overlong punishment -----------------------------------------------------------------------------


def test_soft_overlong_punishment_by_hand():
    # L_max 10, L_cache 4: free up to 6 tokens, then −factor·(|y| − 6)/4; factor 0.5
    lengths = torch.tensor([3, 6, 7, 9, 10])
    got = soft_overlong_punishment(lengths, max_len=10, buffer_len=4, penalty_factor=0.5)
    torch.testing.assert_close(got, torch.tensor([0.0, 0.0, -0.125, -0.375, -0.5]))
    # max_len and buffer_len swapped would punish from |y| > 4 − 10: every completion; factor left out: −0.25 at 7
    assert got[:2].eq(0).all(), "no penalty before L_max − L_cache"


def test_soft_overlong_punishment_is_trls_at_factor_one():
    trl_rewards = pytest.importorskip("trl.rewards")
    punish = trl_rewards.get_soft_overlong_punishment(max_completion_len=10, soft_punish_cache=4)
    lengths = [1, 6, 7, 8, 9, 10]
    ours = soft_overlong_punishment(torch.tensor(lengths), max_len=10, buffer_len=4).tolist()
    assert ours == pytest.approx(punish([[1] * n for n in lengths]))


def test_penalised_rewards_add_the_overlong_punishment_to_the_missing_eos_penalty():
    rollout = rollout_of(["a", "b"], [1, 1], gen_len=4)
    rollout.completion_mask = torch.tensor([[1, 0, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 0, 0]]).bool()
    rollout.completion_ids = torch.tensor([[EOS, 0, 0, 0], [1, 2, EOS, 0], [1, 2, 3, 4], [1, EOS, 0, 0]])
    rollout.scores = torch.tensor([1.0, 0.0, 1.0, 0.5])
    overlong = OverlongBuffer(len=2, penalty_factor=1.0, max_len=4)  # free up to 2 tokens: 3 -> −0.5, 4 -> −1
    got = penalised_rewards(rollout, missing_eos_penalty=0.25, overlong=overlong)
    # row 2 never ended (−0.25) and is 4 long (−1); row 1 is 3 long (−0.5)
    torch.testing.assert_close(got, torch.tensor([1.0, -0.5, -0.25, 0.5]))
    assert torch.equal(penalised_rewards(rollout, None), rollout.scores)


# --- the flags: names, and one line where they cannot apply ----------------------------------------------------


def test_overlong_buffer_of_the_args_and_off_by_default():
    args = make_args("tiny", algo="ppo", gen_len=12, overlong_buffer=True, overlong_buffer_len=4,
                     overlong_buffer_penalty_factor=0.5)
    assert OverlongBuffer.of(args) == OverlongBuffer(len=4, penalty_factor=0.5, max_len=12)
    assert OverlongBuffer.of(make_args("tiny", algo="ppo")) is None


@pytest.mark.parametrize("algo, overrides, line", [
    ("grpo", {"overlong_buffer": True}, "overlong_buffer_len: must be in 1..gen_len (30) with --overlong-buffer; got 0"),
    ("grpo", {"overlong_buffer": True, "overlong_buffer_len": 31}, "overlong_buffer_len: must be in 1..gen_len (30)"),
    ("rloo", {"overlong_buffer_len": 4}, "overlong_buffer_len: needs --overlong-buffer (the penalty is off without it)"),
    ("grpo", {"overlong_buffer": True, "overlong_buffer_len": 4, "overlong_buffer_penalty_factor": -1.0},
     "overlong_buffer_penalty_factor: must be a finite number >= 0"),
    ("grpo", {"filter_groups": True, "max_num_gen_batches": -1}, "max_num_gen_batches: must be >= 0 (0 = no limit)"),
    ("grpo", {"filter_groups": True, "filter_groups_metric": "acc"}, "filter_groups_metric: must be one of seq_reward, score"),
    ("rloo", {"max_num_gen_batches": 3}, "max_num_gen_batches: needs --filter-groups"),
    ("ppo", {"filter_groups": True}, "filter_groups: is not an RLHFArgs field"),  # no groups: nothing to filter
    ("online_dpo", {"filter_groups": True}, "filter_groups: is not an OnlineDPOArgs field"),
])
def test_a_bad_or_misplaced_flag_is_one_line_naming_it(algo, overrides, line):
    with pytest.raises(ConfigError) as err:
        make_args("tiny", algo=algo, **overrides)
    assert str(err.value).startswith(line) and "\n" not in str(err.value)


def test_group_algorithms_take_filter_groups():
    for algo in ("grpo", "rloo"):
        args = make_args("tiny", algo=algo, filter_groups=True, max_num_gen_batches=0, filter_groups_metric="score")
        assert args.filters_groups() and args.max_num_gen_batches == 0
    assert not make_args("tiny", algo="grpo").filters_groups() and not make_args("tiny", algo="ppo").filters_groups()


def test_filter_groups_with_one_step_of_asynchrony_is_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"^filter_groups: samples until the phase's batch is full, and --max-staleness 1"):
        check_staleness("grpo", 1, filter_groups=True)
    check_staleness("grpo", 0, filter_groups=True)
    check_staleness("grpo", 1)

