"""No library code chooses a matplotlib backend (issue 31).

A notebook runs on the inline backend. If training (its curves.png) or an interp page (its
figures) called `matplotlib.use("Agg")`, every later `plt.show()` in the notebook would show
nothing. Here, without a Jupyter kernel: the inline backend is set, a tiny run trains and the
interp report draws every figure type on it, and then the backend must still be the inline one
and `plt.show()` must hand a figure that renders to a PNG to IPython's display.
"""

import matplotlib
import pytest

INLINE = "module://matplotlib_inline.backend_inline"


@pytest.fixture
def inline_backend():
    """The notebook's backend for one test, and the backend before it put back afterwards."""
    import matplotlib.pyplot as plt

    before = matplotlib.get_backend()
    matplotlib.use(INLINE)
    assert matplotlib.get_backend() == INLINE
    yield
    plt.close("all")
    plt.switch_backend(before)


def shown_pngs(monkeypatch) -> list[bytes]:
    """What `plt.show()` hands to IPython's display, rendered as the inline backend renders it."""
    from IPython.core.pylabtools import print_figure
    from matplotlib_inline import backend_inline

    shown: list[bytes] = []
    monkeypatch.setattr(backend_inline, "display", lambda fig, **kw: shown.append(print_figure(fig, "png")))
    return shown


def test_training_and_the_interp_report_leave_a_notebooks_inline_figures_working(
        inline_backend, tmp_path, monkeypatch, one_thread):
    import matplotlib.pyplot as plt

    from interp.probes import REVIEW_PROMPTS
    from interp.report import make_report
    from rlhf_scratch import RLHFTrainer
    from rlhf_scratch.config import make_args
    from rlhf_scratch.engine.runs import load_run

    shown = shown_pngs(monkeypatch)
    run_dir = tmp_path / "run"
    args = make_args("tiny", total_phases=2, batch_size=8, num_minibatches=2, gen_len=5, warmup_steps=1,
                     save_every=0, run_dir=str(run_dir))
    RLHFTrainer(args, quiet=True).train()
    assert (run_dir / "curves.png").stat().st_size > 1000, "training drew its curves"
    assert matplotlib.get_backend() == INLINE, "training chose a backend"

    run = load_run(run_dir)
    make_report(run.reference, run.tuned, list(REVIEW_PROMPTS[:2]), tmp_path / "interp", n_samples=2, gen_len=3,
                progress=False)
    assert (tmp_path / "interp" / "attention_patterns.png").stat().st_size > 1000, "the report drew its figures"
    assert matplotlib.get_backend() == INLINE, "interp chose a backend"
    assert shown == [] and plt.get_fignums() == [], "library figures are not pyplot's: none left open or shown"

    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    plt.show()
    assert len(shown) == 1, "plt.show() displayed nothing: the backend is no longer the inline one"
    assert shown[0].startswith(b"\x89PNG") and len(shown[0]) > 1000
    assert plt.get_fignums() == [], "the inline backend closes what it showed"
