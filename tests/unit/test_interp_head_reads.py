"""interp.head_reads on known answers: a head planted on a token's unembedding column must read that
token first through the logit lens, an MLP head's mean gradient is its hand-worked W₁ᵀ(w₂ ⊙ on), and a
dictionary whose decoder holds the head's direction must return that feature first with cosine 1."""

import copy
import json
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from interp.feature_diff import right_padded
from interp.features import heads_of_run
from interp.head_reads import HEAD_SITE, HeadReader, HeadReads, head_reads, read_direction, site_direction
from interp.levels import DiffLevels, levels_headline, levels_html, other_levels
from interp.toy import toy_model, toy_tokenizer
from rlhf_scratch.algorithms.ppo import TransformerWithValueHead
from rlhf_scratch.config import CommonArgs
from rlhf_scratch.engine.runs import LoadedRun


@pytest.fixture(scope="module")
def model():
    return toy_model(seed=5, tokenizer=toy_tokenizer())


def largest_column(model) -> int:
    """The token whose centred unembedding column is longest: c(u_t) · u_j = c(u_t) · c(u_j) ≤ |c(u_t)|²
    (Cauchy–Schwarz), so reading c(u_t) through W_U promotes t first — an exact known answer."""
    assert torch.all(model.ln_final.w == 1), "the argument needs the final norm's weight at 1"
    centred = model.W_U - model.W_U.mean(0, keepdim=True)
    return int(centred.norm(dim=0).argmax())


def linear_head(w: torch.Tensor) -> nn.Linear:
    head = nn.Linear(len(w), 1)
    with torch.no_grad():
        head.weight.copy_(w[None])
        head.bias.fill_(3.0)
    return head


def test_a_head_planted_on_a_tokens_unembedding_column_reads_that_token_first(model):
    t = largest_column(model)
    hidden = torch.randn(7, model.cfg.d_model)
    reads = head_reads(model, HeadReads([HeadReader("value head", linear_head(model.W_U[:, t].detach()), "planted")]),
                       hidden, {})
    h = reads["heads"][0]
    assert h["method"] == "weight" and h["spread"] == 1.0
    assert h["logit_lens"]["promoted"][0][0] == model.to_string(torch.tensor([t])), \
        "the head reads u_t: through the unembedding its own token must come first"
    negated = head_reads(model, HeadReads([HeadReader("v", linear_head(-model.W_U[:, t].detach()), "")]), hidden, {})
    assert negated["heads"][0]["logit_lens"]["suppressed"][0][0] == model.to_string(torch.tensor([t]))


def test_an_mlp_heads_mean_gradient_is_w1_transpose_w2_over_the_units_that_fire(model):
    # V = w₂ · ReLU(W₁ ĥ + b₁): units 0..d-1 copy ĥ and always fire (b₁ = 100), carrying u_t;
    # units d..2d-1 carry a direction v but never fire (b₁ = −100), so ∇V = u_t at every ĥ, exactly
    d = model.cfg.d_model
    t = largest_column(model)
    u, v = model.W_U[:, t].detach(), torch.randn(d)
    head = nn.Sequential(nn.Linear(d, 4 * d), nn.ReLU(), nn.Linear(4 * d, 1))
    with torch.no_grad():
        head[0].weight.zero_()
        head[0].weight[:d] = torch.eye(d)
        head[0].weight[d : 2 * d] = torch.eye(d)
        head[0].bias.fill_(100.0)
        head[0].bias[d : 2 * d] = -100.0
        head[2].weight.zero_()
        head[2].weight[0, :d] = u
        head[2].weight[0, d : 2 * d] = v
    g, method, spread = read_direction(head, torch.randn(11, d))
    assert method == "mean gradient over 11 positions"
    torch.testing.assert_close(g, u, msg="the units that never fire must not enter the gradient (v leaked in?)")
    assert spread == pytest.approx(1.0)
    # one unit on for half the positions: its share of the mean gradient is exactly a half
    with torch.no_grad():
        head[0].bias[d : 2 * d] = 0.0
        head[0].weight[d : 2 * d] = 0.0
        head[0].weight[d, 0] = 1.0  # unit d fires where ĥ_0 > 0
    hidden = torch.randn(10, d)
    hidden[:5, 0], hidden[5:, 0] = 1.0, -1.0
    g, _, spread = read_direction(head, hidden)
    torch.testing.assert_close(g, u + 0.5 * v[0] * torch.nn.functional.one_hot(torch.tensor(0), d).float())
    assert spread < 1.0


def test_a_dictionary_holding_the_heads_direction_returns_that_feature_first_with_cosine_1(model):
    d, L = model.cfg.d_model, model.cfg.n_layers
    w = torch.randn(d) + 2.0  # a mean part, which LayerNorm's centring removes at the residual
    head = HeadReads([HeadReader("reward model", linear_head(w), "planted")])
    W_hat = torch.randn(64, d)
    W_hat[17] = 3 * w  # a dictionary of ĥ: the direction is w itself
    W_res = torch.randn(64, d)
    W_res[40] = w - w.mean()  # a dictionary of the last residual: ĥ = c(x)/s, so the direction is c(w)
    dictionaries = {"SAE of ĥ": (W_hat, None, HEAD_SITE),
                    "SAE of the last residual": (W_res, None, f"blocks.{L - 1}.hook_resid_post"),
                    "SAE of block 0": (W_res, None, "blocks.0.hook_resid_post")}
    h = head_reads(model, head, torch.randn(3, d), dictionaries)["heads"][0]
    top = h["dictionaries"]["SAE of ĥ"][0]
    assert top["feature"] == 17 and top["cosine"] == pytest.approx(1.0, abs=1e-5)
    top = h["dictionaries"]["SAE of the last residual"][0]
    assert top["feature"] == 40 and top["cosine"] == pytest.approx(1.0, abs=1e-5), "not centred like the final norm?"
    assert h["other_sites"] == {"SAE of block 0": "blocks.0.hook_resid_post"}, "another site reads another vector"
    assert site_direction(model, w, "blocks.0.hook_mlp_out") is None


def test_the_features_page_shows_what_the_heads_read_beside_the_other_levels(model):
    tuned = copy.deepcopy(model)
    with torch.no_grad():
        tuned.W_U.add_(0.01)
    policy = TransformerWithValueHead(tuned)
    tokens, attend = right_padded(model, ["good movie and fine", "bad plot", "the film was fine and good"])
    L = model.cfg.n_layers
    sae = SimpleNamespace(W_dec=torch.randn(32, model.cfg.d_model))
    levels = DiffLevels(heads=HeadReads([HeadReader("value head", policy.value_head, "PPO's value head")],
                                        ["The reward (vader) is a rule on the text: it reads text, not this model's residual."]))
    S = other_levels(model, tuned, sae, f"blocks.{L - 1}.hook_resid_post", tokens, attend, levels, progress=False)
    h = S["heads"]["heads"][0]
    assert h["method"].startswith("mean gradient over ") and len(h["dictionaries"]["SAE"]) == 10
    json.dumps(S["heads"])  # the part features.json carries
    S2 = other_levels(model, tuned, sae, "blocks.0.hook_resid_post", tokens, attend, levels, progress=False)
    assert S2["heads"]["heads"][0]["other_sites"] == {"SAE": "blocks.0.hook_resid_post"}
    lines = levels_headline(S2)
    assert any("value head reads" in line and "logit lens only" in line for line in lines)
    assert any("reads text, not this model's residual" in line for line in lines)
    assert "which directions they read" in "".join(levels_html(S2))


def run_of(policy, algo: str, tmp_path, **fields) -> LoadedRun:
    return LoadedRun(policy=policy, reference=policy if algo != "ppo" else policy.base,
                     args=CommonArgs.from_dict({"algo": algo, **fields}), path=tmp_path)


def test_heads_of_run_names_what_reads_text_and_what_reads_the_residual(model, tmp_path):
    reads = heads_of_run(run_of(TransformerWithValueHead(model), "ppo", tmp_path))
    assert [r.name for r in reads.readers] == ["value head"]
    assert reads.notes == ["The reward is the classifier 'tiny', a separate model with its own embedding: it reads "
                           "text, not this model's residual."]
    rm = tmp_path / "rm"
    rm.mkdir()
    (rm / "config.json").write_text(json.dumps({"algo": "reward_model", "model": "gpt2"}))
    reads = heads_of_run(run_of(model, "rloo", tmp_path, reward_model=str(rm)))
    assert reads.readers == [] and reads.notes[0] == "rloo trains no value head: no V reads this model's residual."
    assert "is built on gpt2, not tiny: it reads another model's residual" in reads.notes[1]
    reads = heads_of_run(run_of(model, "grpo", tmp_path, task="vader"))
    assert reads.notes[1] == "The reward (vader) is a rule on the text: it reads text, not this model's residual."


def test_a_reward_model_run_on_the_same_lm_is_read_by_its_head_weight(tmp_path):
    from rlhf_scratch.models.loading import load_lm
    from rlhf_scratch.reward.model import WEIGHTS_FILE, RewardModel

    rm_dir = tmp_path / "rm"
    rm_dir.mkdir()
    lm = load_lm("tiny")
    rm = RewardModel(lm)
    torch.save(rm.state_dict(), rm_dir / WEIGHTS_FILE)
    (rm_dir / "config.json").write_text(json.dumps({"algo": "reward_model", "model": "tiny"}))
    reads = heads_of_run(run_of(lm, "rloo", tmp_path, reward_model=str(rm_dir)))
    assert [r.name for r in reads.readers] == ["reward model"] and len(reads.notes) == 1
    g, method, _ = read_direction(reads.readers[0].head, torch.randn(2, lm.cfg.d_model))
    assert method == "weight"
    torch.testing.assert_close(g, rm.score.weight[0].detach())
