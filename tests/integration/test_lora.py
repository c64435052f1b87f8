"""LoRA on the HookedTransformer (rlhf_scratch/models/lora.py): ΔW = (α/r)·B·A by hand, the per-head layout, the
base bit for bit with the adapters off, the reference as the policy with its adapters off, what trains
and what is saved, and a LoRA run read back by load_run, export, interp.report and interp.features."""

import json

import pytest
import torch

from rlhf_scratch.algorithms.ppo import RLHFTrainer
from rlhf_scratch.config import LORA_TARGETS, ConfigError, make_args
from rlhf_scratch.models.loading import load_lm
from rlhf_scratch.models.lora import (
    LAYOUTS,
    LoRA,
    adapters,
    adapters_off,
    add_lora,
    base_sha256,
    load_policy_state_dict,
    lora_delta,
    lora_parameters,
    lora_state_dict,
    merge_lora,
    policy_state_dict,
    to_matrix,
    to_weight_layout,
)

pytestmark = pytest.mark.usefixtures("one_thread")

PROMPTS = ["This movie was really", "A tedious, overlong mess that never finds its footing."]


def tokens(model):
    return model.to_tokens(PROMPTS, padding_side="right")


def move_adapters(model, scale=0.1, seed=0):
    """Give every B (zero at the start) seeded random values: adapters that have 'trained'."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for lora in adapters(model):
            lora.B.copy_(scale * torch.randn(lora.B.shape, generator=gen))
    return model


# --- the formula and the layout ---------------------------------------------------------------------


def test_delta_is_alpha_over_r_times_B_A_in_transformer_lens_x_at_W_layout():
    A = torch.tensor([[1.0, 2.0]])  # r = 1, d_in = 2
    B = torch.tensor([[1.0], [0.0], [-1.0]])  # d_out = 3
    # B·A = [[1, 2], [0, 0], [-1, -2]] (d_out × d_in); α/r = 2; TransformerLens keeps x @ W: the transpose
    expected = torch.tensor([[2.0, 0.0, -2.0], [4.0, 0.0, -4.0]])
    assert torch.equal(lora_delta(A, B, 2.0), expected)
    assert not torch.equal(lora_delta(A, B, 1.0), expected), "the scale α/r is applied"


def test_every_target_is_seen_as_gpt2s_matrix_and_head_h_owns_its_d_head_columns(tiny_random_lm):
    """W_Q [n_heads, d_model, d_head] as d_model × (n_heads·d_head), head-major (GPT-2's c_attn order,
    hf_format's rearrange); W_O as (n_heads·d_head) × d_model. A head-minor order ('(h n)') would mix heads."""
    assert tuple(LAYOUTS) == LORA_TARGETS
    attn, mlp = tiny_random_lm.blocks[0].attn, tiny_random_lm.blocks[0].mlp
    d_head = attn.W_Q.shape[-1]
    for head in range(attn.W_Q.shape[0]):
        columns = slice(head * d_head, (head + 1) * d_head)
        assert torch.equal(to_matrix(attn.W_Q, "W_Q")[:, columns], attn.W_Q[head])
        assert torch.equal(to_matrix(attn.W_O, "W_O")[columns, :], attn.W_O[head])
    for target in LORA_TARGETS:
        weight = getattr(mlp if target in ("W_in", "W_out") else attn, target)
        assert torch.equal(to_weight_layout(to_matrix(weight, target), target, weight.shape), weight), target


def test_rank_r_bounds_the_whole_layers_update_and_so_each_heads(tiny_random_lm):
    """One factor pair per matrix: rank(ΔW_Q over all heads) = r, each head's slice ≤ r (d_head = 4 > r = 2)."""
    model = move_adapters(add_lora(tiny_random_lm, rank=2, alpha=2.0, targets=["W_Q"]))
    lora = adapters(model)[0]
    delta = lora_delta(lora.A, lora.B, lora.scale)  # [d_model 16, n_heads·d_head 16]
    assert torch.linalg.matrix_rank(delta).item() == 2
    per_head = to_weight_layout(delta, "W_Q", lora.shape)  # [4, 16, 4]
    assert [torch.linalg.matrix_rank(h).item() for h in per_head] == [2, 2, 2, 2]
    assert sum(p.numel() for p in lora_parameters(model)) == 2 * 2 * (16 + 16), "r·(d_model + n_heads·d_head) a layer"


# --- the model: base at step 0, base with the adapters off, hooks unchanged -----------------------------


def test_at_step_0_b_is_zero_and_the_model_is_the_base_bit_for_bit():
    base, model = load_lm("tiny").eval(), add_lora(load_lm("tiny").eval(), rank=4, alpha=32.0)
    assert all(torch.equal(lora.B, torch.zeros_like(lora.B)) for lora in adapters(model))
    assert all(lora.A.abs().sum() > 0 for lora in adapters(model)), "A is not zero: B's first gradient is not"
    with torch.no_grad():
        assert torch.equal(model(tokens(model)), base(tokens(base)))


def test_with_the_adapters_off_the_logits_are_the_base_models_exactly_and_they_come_back_on():
    base = load_lm("tiny").eval()
    model = move_adapters(add_lora(load_lm("tiny").eval(), rank=4, alpha=32.0))
    ids = tokens(base)
    with torch.no_grad():
        expected, tuned = base(ids), model(ids)
        assert (tuned - expected).abs().max() > 0.1, "the adapters moved the model"
        with adapters_off(model):
            assert torch.equal(model(ids), expected)
        assert torch.equal(model(ids), tuned), "on again after the block"
        with pytest.raises(KeyError), adapters_off(model):
            raise KeyError  # an exception inside the block
        assert torch.equal(model(ids), tuned), "on again after an exception"
        with adapters_off(base):  # a model without adapters (a frozen reference copy): unchanged
            assert torch.equal(base(ids), expected)


def test_hooks_and_weights_read_a_lora_model_as_the_merged_full_model(tiny_random_lm):
    """What the interp tools see: the hook activations and W_Q of a LoRA model are those of the same model
    with ΔW merged into its weights (torch.equal: the merged weights are the tensors the forward used)."""
    import copy

    from interp.attention import head_weight_change

    reference = copy.deepcopy(tiny_random_lm)
    model = move_adapters(add_lora(tiny_random_lm, rank=2, alpha=4.0))
    ids = torch.tensor([[1, 5, 7, 2, 9]])
    with torch.no_grad():
        logits, cache = model.run_with_cache(ids)
        W_Q = model.W_Q.clone()
        change = head_weight_change(reference, model)
        merged = merge_lora(model)
        merged_logits, merged_cache = merged.run_with_cache(ids)
    assert not any(isinstance(m, LoRA) for m in merged.modules()) and set(merged.state_dict()) == set(reference.state_dict())
    assert torch.equal(merged_logits, logits) and torch.equal(merged.W_Q, W_Q)
    for name in ("blocks.0.attn.hook_q", "blocks.1.attn.hook_pattern", "blocks.1.mlp.hook_post", "blocks.1.hook_resid_post"):
        assert torch.equal(cache[name], merged_cache[name]), name
    assert torch.equal(change["all"], head_weight_change(reference, merged)["all"]) and change["all"].min() > 0
    assert all(p.requires_grad for p in merged.parameters()), "a plain model again"


def test_only_the_adapters_require_gradients_and_the_base_hash_ignores_them():
    model = load_lm("tiny")
    before = base_sha256(model)
    add_lora(model, rank=4, alpha=32.0, targets=["W_Q", "W_in"])
    assert [id(p) for p in model.parameters() if p.requires_grad] == [id(p) for p in lora_parameters(model)]
    assert len(lora_parameters(model)) == 2 * 2 * model.cfg.n_layers
    assert set(lora_state_dict(model)) == {f"blocks.{i}.{m}.parametrizations.{w}.0.{f}" for i in range(4)
                                           for m, w in (("attn", "W_Q"), ("mlp", "W_in")) for f in "AB"}
    assert base_sha256(move_adapters(model)) == before == model.lora_config.base_sha256
    with torch.no_grad():
        model.blocks[0].mlp.b_in[0] += 1.0
    assert base_sha256(model) != before


def test_bad_lora_settings_are_one_line_each():
    for overrides, message in [
        (dict(lora_rank=-1), "lora_rank: must be >= 0 (0 = full fine-tuning); got -1"),
        (dict(lora_rank=4, lora_alpha=0.0), "lora_alpha: must be > 0; got 0.0"),
        (dict(lora_targets="W_Q,W_U"), "lora_targets: must be distinct names from W_Q,W_K,W_V,W_O,W_in,W_out, "
                                       "comma-separated; got 'W_Q,W_U'"),
        (dict(lora_targets="W_Q,W_Q"), "lora_targets: must be distinct"),
        (dict(lora_targets=""), "lora_targets: must be distinct"),
    ]:
        with pytest.raises(ConfigError) as err:
            make_args("tiny", **overrides)
        assert str(err.value).startswith(message) and "\n" not in str(err.value)
    assert make_args("tiny", lora_rank=4, lora_targets="W_Q, W_V").lora_target_names() == ("W_Q", "W_V")
    with pytest.raises(ConfigError, match=r"^lora_rank: must be in 1\.\.128 \(the smallest adapted matrix's side"):
        add_lora(load_lm("tiny"), rank=129, alpha=32.0)


# --- the trainer: one model, the reference as its adapters off -------------------------------------------


def lora_trainer(**overrides):
    values = dict(lora_rank=4, batch_size=8, num_minibatches=1, batches_per_learning_phase=1, gen_len=6, seed=3,
                  device="cpu", threads=1)
    return RLHFTrainer(make_args("tiny", **{**values, **overrides}), quiet=True)


def test_a_lora_trainer_loads_no_second_model_and_its_optimizer_holds_only_adapters_and_value_head():
    trainer = lora_trainer()
    assert trainer.ref_model is trainer.lm, "the reference is the policy's LM (with its adapters off)"
    held = [id(p) for group in trainer.optimizer.param_groups for p in group["params"]]
    assert held == [id(p) for p in lora_parameters(trainer.lm)] + [id(p) for p in trainer.policy.value_head.parameters()]
    assert [g["lr"] for g in trainer.optimizer.param_groups] == [0.0, 0.0], "(warmup: phase 1 trains at 0)"
    full = RLHFTrainer(make_args("tiny", batch_size=8, gen_len=6, device="cpu", threads=1), quiet=True)
    assert full.ref_model is not full.lm and len([p for g in full.optimizer.param_groups for p in g["params"]]) == len(
        list(full.policy.parameters())), "full fine-tuning: every parameter, a separate reference"


def test_a_learning_phase_moves_the_adapters_and_value_head_and_nothing_of_the_base():
    trainer = lora_trainer(warmup_steps=0, base_lr=1e-2)
    before = {k: v.clone() for k, v in trainer.policy.state_dict().items()}
    base_hash = base_sha256(trainer.lm)
    trainer.learning_phase(trainer.rollout_phase())
    after = trainer.policy.state_dict()
    moved = {k for k in before if not torch.equal(before[k], after[k])}
    assert moved == set(lora_state_dict(trainer.policy)) | {k for k in before if k.startswith("value_head.")}
    A_grads = [lora.A.grad for lora in adapters(trainer.lm)]
    assert all(torch.equal(g, torch.zeros_like(g)) for g in A_grads), "while B = 0, ∂J/∂A = (α/r) Bᵀ(…) = 0: A moves by AdamW's decay only"
    assert base_sha256(trainer.lm) == base_hash
    assert all(p.grad is None for p in trainer.lm.parameters() if not p.requires_grad), "no gradient kept for the base"


@pytest.mark.parametrize("cache_ref_logprobs", [True, False])
def test_at_step_0_the_policy_is_the_reference_the_ratio_is_1_and_the_kl_0(cache_ref_logprobs):
    trainer = lora_trainer(cache_ref_logprobs=cache_ref_logprobs)
    rollout = trainer.rollout_phase()
    assert torch.equal(rollout.ref_logprobs, rollout.logprobs) and torch.equal(rollout.kl, torch.zeros_like(rollout.kl))
    stats = trainer.learning_phase(rollout)  # one minibatch: the first one's numbers
    assert stats["losses/approx_kl"] == 0.0 and stats["losses/clipfrac"] == 0.0
    # From the rollout's kept logsumexp the KL is Σ p log p − E_p[z_ref] + logsumexp(z_ref) (vocab_terms): with
    # π = π_ref it cancels to float rounding (~1e-8), not bit for bit; a wrong reference gives ≥ 0.01 (next test).
    assert abs(stats["losses/kl_penalty"]) < 1e-6


@pytest.mark.parametrize("cache_ref_logprobs", [True, False])
def test_after_the_adapters_moved_the_reference_is_still_the_base(cache_ref_logprobs):
    """Both reference forwards — the rollout's (score_tokens) and PPO's per-minibatch one — run the policy with its
    adapters off: the same numbers as a separately loaded frozen base. Without `adapters_off` the reference
    would be the policy itself: KL 0, ref log-probs = log-probs."""
    from rlhf_scratch.models.policy import load_reference

    trainer = lora_trainer(cache_ref_logprobs=cache_ref_logprobs)
    move_adapters(trainer.lm)
    torch.manual_seed(0)
    rollout = trainer.rollout_phase()
    stats = trainer.learning_phase(rollout)
    assert rollout.kl.mean() > 0.01
    frozen = lora_trainer(cache_ref_logprobs=cache_ref_logprobs)
    move_adapters(frozen.lm)
    frozen.ref_model = load_reference("tiny", "cpu")  # the reference of a full run: a second model
    torch.manual_seed(0)
    expected = frozen.rollout_phase()
    assert expected.completions == rollout.completions
    torch.testing.assert_close(rollout.ref_logprobs, expected.ref_logprobs, rtol=0, atol=1e-6)
    torch.testing.assert_close(rollout.kl, expected.kl, rtol=0, atol=1e-6)
    assert stats["losses/kl_penalty"] == pytest.approx(frozen.learning_phase(expected)["losses/kl_penalty"], abs=1e-6)


@pytest.mark.parametrize("algo, extra", [("rloo", dict(num_generations=2)), ("online_dpo", {}),
                                         ("grpo", dict(num_generations=2, beta=0.04)), ("grpo", dict(num_generations=2))])
def test_every_algorithm_trains_only_its_adapters_against_the_policy_with_adapters_off(algo, extra):
    from rlhf_scratch.config import registry

    args = make_args("tiny", algo, lora_rank=2, batch_size=4, num_minibatches=1, gen_len=4, warmup_steps=0,
                     base_lr=1e-2, device="cpu", threads=1, **extra)
    trainer = registry.get(algo).trainer_class()(args, quiet=True)
    assert trainer.ref_model is (trainer.lm if trainer.uses_reference() else None), "no second model, ever"
    held = [id(p) for group in trainer.optimizer.param_groups for p in group["params"]]
    assert held == [id(p) for p in lora_parameters(trainer.lm)]
    base_hash = base_sha256(trainer.lm)
    before = lora_state_dict(trainer.lm)
    before = {k: v.clone() for k, v in before.items()}
    rollout = trainer.rollout_phase()
    if trainer.uses_reference():
        assert torch.equal(rollout.kl, torch.zeros_like(rollout.kl)), "B = 0: the policy is its reference"
    trainer.learning_phase(rollout)
    assert base_sha256(trainer.lm) == base_hash
    assert any(not torch.equal(v, lora_state_dict(trainer.lm)[k]) for k, v in before.items() if k.endswith(".B"))


# --- what is saved ----------------------------------------------------------------------------------------


def test_a_lora_policy_saves_its_trainable_tensors_and_the_base_hash_and_refuses_another_base():
    trainer = lora_trainer()
    move_adapters(trainer.lm)
    state = policy_state_dict(trainer.policy)
    assert set(state) == {"lora", "base_sha256", "trainable"}
    assert state["lora"] == {"rank": 4, "alpha": 32.0, "targets": list(LORA_TARGETS)}
    assert set(state["trainable"]) == set(lora_state_dict(trainer.policy)) | {
        f"value_head.{i}.{p}" for i in (0, 2) for p in ("weight", "bias")}
    fresh = lora_trainer(seed=4)  # another draw of A, B = 0
    load_policy_state_dict(fresh.policy, state)
    assert all(torch.equal(v, fresh.policy.state_dict()[k]) for k, v in trainer.policy.state_dict().items())
    with pytest.raises(ConfigError) as err:
        load_policy_state_dict(fresh.policy, {**state, "base_sha256": "0" * 64})
    assert str(err.value) == (f"lora: the adapters were trained on a base with weights sha256 000000000000…, but the "
                              f"base loaded now has {state['base_sha256'][:12]}…: load the model the run started from")
    with pytest.raises(ConfigError, match="^lora_rank: the saved policy holds full weights"):
        load_policy_state_dict(fresh.policy, trainer.policy.state_dict())


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory):
    """A finished 2-phase PPO run with rank-4 adapters, trained hard (lr 1e-2) to differ from the base."""
    from rlhf_scratch.engine.runs import load_run

    run_dir = tmp_path_factory.mktemp("runs") / "lora"
    args = make_args("tiny", lora_rank=4, total_phases=2, batch_size=8, num_minibatches=2, gen_len=8, warmup_steps=1,
                     base_lr=1e-2, run_dir=str(run_dir), seed=0, threads=1)
    trainer = RLHFTrainer(args, quiet=True)
    trainer.train(run_dir)
    return run_dir, trainer, load_run(run_dir)


def test_load_run_rebuilds_base_plus_adapters_from_a_small_policy_file(lora_run):
    run_dir, trainer, run = lora_run
    saved = torch.load(run_dir / "policy.pt", weights_only=True)
    assert set(saved) == {"lora", "base_sha256", "trainable"}
    assert (run_dir / "policy.pt").stat().st_size < 0.1 * sum(p.numel() * 4 for p in trainer.lm.parameters())
    ids = tokens(run.tuned)
    with torch.no_grad():
        assert torch.equal(run.tuned(ids), trainer.lm.eval()(ids))
        assert torch.equal(run.reference(ids), load_lm("tiny").eval()(ids))
        assert (run.tuned(ids) - run.reference(ids)).abs().max() > 1e-2, "the adapters trained"
    checkpoint = torch.load(next((run_dir / "checkpoints").glob("phase-*/checkpoint.pt")), weights_only=False)
    assert set(checkpoint["policy"]) == {"lora", "base_sha256", "trainable"}, "checkpoints hold the trainable state only"


def test_load_run_refuses_adapters_of_another_base_in_one_line(lora_run, tmp_path):
    import shutil

    from rlhf_scratch.engine.runs import RunFolderError, load_run

    run_dir = tmp_path / "moved"
    shutil.copytree(lora_run[0], run_dir)
    state = torch.load(run_dir / "policy.pt", weights_only=True)
    torch.save({**state, "base_sha256": "f" * 64}, run_dir / "policy.pt")
    with pytest.raises(RunFolderError, match=r"policy\.pt: does not fit TransformerWithValueHead of 'tiny' \(lora: the "
                                             r"adapters were trained on a base with weights sha256 ffffffffffff…") as err:
        load_run(run_dir)
    assert "\n" not in str(err.value)


def test_export_merges_the_adapters_into_a_plain_gpt2_with_the_same_log_probs(lora_run, tmp_path):
    from transformers import AutoModelForCausalLM

    from rlhf_scratch.commands.export import main

    run_dir, _, run = lora_run
    assert main([str(run_dir), str(tmp_path / "hf")]) == 0
    hf = AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    ids = tokens(run.tuned)
    with torch.no_grad():
        ours, theirs = run.tuned(ids).log_softmax(-1), hf(ids).logits.log_softmax(-1)
    assert (ours - theirs).abs().max() <= 1e-5
    assert (run.reference(ids).log_softmax(-1) - theirs).abs().max() > 1e-3, "the tuned model, not the base"


def test_interp_report_reads_a_lora_run(lora_run, tmp_path, capsys):
    from interp.report import main

    out = tmp_path / "interp"
    assert main([str(lora_run[0]), "--n-samples", "2", "--gen-len", "3", "--out", str(out), "--no-reward"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["head_weight_change_relative"]["all"][0]["value"] > 0, "the adapters' ΔW is seen as a weight change"


@pytest.mark.slow
def test_interp_features_reads_a_lora_run(lora_run, tmp_path):
    from interp import features

    small = ["--layer", "1", "--d-sae", "64", "--k", "4", "--training-tokens", "4096", "--eval-batches", "1",
             "--n-samples", "4", "--n-diff", "4", "--n-snippets", "8", "--top-n", "3", "--no-reward",
             "--cache-dir", str(tmp_path / "saes"), "--out", str(tmp_path / "interp")]
    assert features.main([str(lora_run[0]), *small]) == 0
    summary = json.loads((tmp_path / "interp" / "features" / "features.json").read_text())
    assert len(summary["top_features"]) == 3
