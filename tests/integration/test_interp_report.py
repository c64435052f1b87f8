"""interp.report: the report end to end, on a toy pair and on a run folder made here."""

import json

import pytest
import torch

from interp.logits import residual_sentiment_direction, sentiment_tokens
from interp.probes import REVIEW_PROMPTS
from interp.report import main, make_report
from interp.toy import perturb_head, toy_model, toy_tokenizer

pytestmark = pytest.mark.usefixtures("one_thread")


def _count_good(texts):
    return [float(t.count(" good")) for t in texts]


def test_make_report_on_a_toy_pair(tmp_path):
    ref = toy_model(seed=0, tokenizer=toy_tokenizer())
    st = sentiment_tokens(ref)
    tuned = perturb_head(ref, 1, 2, residual_sentiment_direction(ref, st), scale=5.0)
    summary = make_report(ref, tuned, list(REVIEW_PROMPTS[:2]), tmp_path, reward_fn=_count_good,
                          run_prompt="This movie was really", n_samples=2, gen_len=3, progress=False)
    html = (tmp_path / "report.html").read_text()
    assert html.count("data:image/png;base64,") >= 10, "figures must be embedded"
    for png in ("logit_lens.png", "head_dla.png", "patching_layers.png", "head_weight_change.png"):
        assert (tmp_path / png).stat().st_size > 1000, png
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved["head_dla"]["top_diff"][0]["head"] == "L1H2", "the changed head leads the DLA change"
    assert saved["residual_patching"]["fraction"][-1] == pytest.approx(1.0, abs=1e-3)
    assert summary["prompts"][0] == "This movie was really" and "reward" in saved


def test_bad_run_dir_is_one_line_and_exit_2(tmp_path, capsys):
    assert main([str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "nope" in err and "no such run folder" in err


def _gpt2_folder(folder, tokenizer):
    """A random 2-layer GPT-2 in Hugging Face format with the toy tokenizer (like the tiny preset)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=len(tokenizer), n_positions=64, n_ctx=64, n_embd=32, n_layer=2, n_head=4,
                        bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    GPT2LMHeadModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_report_end_to_end_on_a_run_folder(tmp_path, capsys):
    runs = pytest.importorskip("rlhf_scratch.engine.runs")
    from rlhf_scratch.algorithms.ppo import TransformerWithValueHead
    from rlhf_scratch.config import make_args
    from rlhf_scratch.models.loading import load_lm

    lm = _gpt2_folder(tmp_path / "lm", toy_tokenizer(str(tmp_path / "tok")))
    args = make_args("tiny", model=str(lm), task="periods", run_dir=str(tmp_path / "run"),
                     prefix="This movie was really")
    run_dir = runs.new_run_dir(args)
    policy = TransformerWithValueHead(load_lm(str(lm)))
    with torch.no_grad():  # the "training": nudge one head
        policy.base.blocks[1].attn.W_O[0] += 0.5 * torch.randn_like(policy.base.blocks[1].attn.W_O[0])
    runs.save_run_policy(run_dir, policy)

    assert main([str(run_dir), "--n-samples", "2", "--gen-len", "3"]) == 0
    out = run_dir / "interp"
    assert (out / "report.html").is_file() and (out / "summary.json").is_file()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["head_weight_change_relative"]["all"][0]["head"] == "L1H0"
    assert "reward" in summary and summary["prompts"][0] == "This movie was really"
    assert "wrote" in capsys.readouterr().out


def test_a_tiny_gap_is_called_noise_not_a_percentage(tmp_path):
    import copy

    ref = toy_model(seed=0, tokenizer=toy_tokenizer())
    st = sentiment_tokens(ref)
    tuned = copy.deepcopy(ref)
    summary = make_report(ref, tuned, list(REVIEW_PROMPTS[:2]), tmp_path, n_samples=2, gen_len=3, progress=False)
    line = next(l for l in summary["headline"] if l.startswith("Residual patching"))
    assert "fractions of it are noise" in line and "recovers" not in line, line
    tuned = perturb_head(ref, 1, 2, residual_sentiment_direction(ref, st), scale=5.0)
    summary = make_report(ref, tuned, list(REVIEW_PROMPTS[:2]), tmp_path / "b", n_samples=2, gen_len=3, progress=False)
    assert "recovers 100%" in next(l for l in summary["headline"] if l.startswith("Residual patching"))


def test_report_neuron_section_finds_the_changed_neuron(tmp_path):
    import copy

    import torch

    ref = toy_model(seed=0, tokenizer=toy_tokenizer())
    st = sentiment_tokens(ref)
    tuned = copy.deepcopy(ref)
    with torch.no_grad():
        tuned.blocks[1].mlp.W_out[11] += 3.0 * residual_sentiment_direction(ref, st)
    make_report(ref, tuned, list(REVIEW_PROMPTS[:2]), tmp_path, n_samples=2, gen_len=3, progress=False)
    saved = json.loads((tmp_path / "summary.json").read_text())
    top = saved["neurons"]["top_dla_change"][0]
    assert top["neuron"] == "L1N11" and top["change"] > 0, top
    assert top["activation_change"] == 0.0, "only its output weights changed"
    assert (tmp_path / "neuron_dla.png").stat().st_size > 1000
    assert "top neurons by DLA change" in (tmp_path / "report.html").read_text()


def test_the_progress_bar_names_the_analyses_and_every_one_runs(tmp_path, monkeypatch):
    """The steps are `report_steps.ANALYSES`, run by `report_page.make_report`: the bar's names come from it (add
    one, it shows), each runs once in order."""
    import functools

    import tqdm.auto

    from interp import report_page
    from interp.report_steps import ANALYSES, step_name

    assert [step_name(a) for a in ANALYSES] == [
        "logits", "logit lens", "decomposition", "residual drift", "residual patching", "head dla", "weight change",
        "head ablation", "head patching", "neurons", "attention patterns", "reward"]
    ran, shown = [], []

    def recorded(analysis):
        @functools.wraps(analysis)
        def run(ctx):
            ran.append(analysis.__name__)
            return analysis(ctx)
        return run

    def analyse_extra_check(ctx):
        return {"extra": sorted(ctx.summary)[:2]}

    class Bar:  # tqdm's part that make_report uses, recording the step names shown
        def __init__(self, total, **kwargs):
            self.total, self.n = total, 0

        def set_postfix_str(self, text):
            shown.append(text)

        def update(self):
            self.n += 1

        def close(self):
            assert self.n == self.total, "the bar counts every step"

    steps = tuple(recorded(a) for a in ANALYSES) + (analyse_extra_check,)
    monkeypatch.setattr(report_page, "ANALYSES", steps)
    monkeypatch.setattr(tqdm.auto, "tqdm", Bar)
    ref = toy_model(seed=0, tokenizer=toy_tokenizer())
    summary = make_report(ref, perturb_head(ref, 1, 2, torch.randn(ref.cfg.d_model), scale=1.0),
                          list(REVIEW_PROMPTS[:2]), tmp_path, reward_fn=_count_good, n_samples=2, gen_len=3)
    assert ran == [a.__name__ for a in steps[:-1]], "every analysis runs once, in ANALYSES' order"
    assert shown == [step_name(a) for a in steps] + ["write"], shown
    assert shown[-2] == "extra check" and summary["extra"] == ["attention_heads_shown", "decomposition"]
    assert "reward" in summary and "neurons" in summary


def test_page_helpers_escape_and_build_tables_and_figures_by_hand(tmp_path):
    from rlhf_scratch.pages.html import Html, esc, figure, page, table

    assert esc("<b class=\"x\">Tom's & co</b>") == "&lt;b class=&quot;x&quot;&gt;Tom&#x27;s &amp; co&lt;/b&gt;"
    assert esc(Html("<br>")) == "<br>" and esc(1.5) == "1.5"
    assert table([("a<b", 1.5), ("c", Html("<i>d</i>"))], header=["k", "v"]) == (
        "<table><tr><th>k</th><th>v</th></tr><tr><th>a&lt;b</th><td>1.5</td></tr>"
        "<tr><th>c</th><td><i>d</i></td></tr></table>")
    assert table([("x", "y")], row_headers=False) == "<table><tr><td>x</td><td>y</td></tr></table>"
    png = tmp_path / "f.png"
    png.write_bytes(b"abc")  # base64 "YWJj"
    assert figure(png) == '<figure><img src="data:image/png;base64,YWJj" alt="f.png"></figure>'
    assert figure(png, "T<", "c&d") == ('<figure><h3>T&lt;</h3><img src="data:image/png;base64,YWJj" alt="f.png">'
                                        "<figcaption>c&amp;d</figcaption></figure>")
    html = page("a<b", ["<p>x</p>", "<p>y</p>"])
    assert html.startswith("<!doctype html><html><head><meta charset='utf-8'><title>a&lt;b</title><style>")
    assert html.endswith("</style></head><body>\n<p>x</p>\n<p>y</p></body></html>")
