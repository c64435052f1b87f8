"""`from rlhf_scratch import ...`: the names a user of the blog (and of TRL) reaches for; and the
`python -m rlhf_scratch.X` paths the docs give, each a file."""

import importlib.util
import re
from pathlib import Path

import pytest

import rlhf_scratch

ROOT = Path(__file__).resolve().parents[2]

BLOG_NAMES = [
    "RLHFTrainer", "RLHFArgs", "get_samples", "get_log_probs", "compute_advantages", "calc_kl_penalty",
    "calc_entropy_bonus", "calc_value_fn_loss", "calc_clipped_sur_obj", "ReplayMemory", "ReplayMinibatch",
    "TransformerWithValueHead", "EarlyStopping", "AdaptiveKLController", "normalize_reward", "load_lm",
    "load_classifier", "load_run",
]
SIBLING_NAMES = ["RLOOTrainer", "compute_rloo_advantages", "OnlineDPOTrainer", "calc_dpo_loss", "Rollout", "make_rollout"]
USE_NAMES = ["to_hf_gpt2", "sample_both", "heldout_metrics"]


def test_every_public_name_imports_from_the_top_level():
    for name in BLOG_NAMES + SIBLING_NAMES + USE_NAMES:
        assert name in rlhf_scratch.__all__, f"{name} missing from rlhf_scratch.__all__"
        assert getattr(rlhf_scratch, name) is not None
    for name in rlhf_scratch.__all__:
        module = rlhf_scratch._EXPORTS[name]
        assert getattr(rlhf_scratch, name) is getattr(__import__(f"rlhf_scratch.{module}", fromlist=[name]), name)
    from rlhf_scratch import RLHFTrainer, calc_clipped_sur_obj  # noqa: F401  (the form users write)


DOCS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]
PYTHON_M = re.compile(r"-m ((?:rlhf_scratch|interp)(?:\.\w+)+)")
"""`python -m rlhf_scratch.train`, `torchrun ... -m rlhf_scratch.train`, `python -m interp.report`."""


def python_m_paths(text: str) -> set[str]:
    """The module paths of every `-m MODULE` in `text` (a trailing dot of a sentence dropped)."""
    return set(PYTHON_M.findall(text))


def runnable_file(module: str) -> Path | None:
    """The file `python -m module` runs (a module's own .py, a package's __main__.py), found without
    running it (`importlib.util.find_spec` imports only the parent packages); None if there is none."""
    try:
        spec = importlib.util.find_spec(module)
    except ModuleNotFoundError:  # a parent that is not a package
        return None
    if spec is None or spec.origin is None or not spec.has_location:
        return None
    path = Path(spec.origin)
    if spec.submodule_search_locations is not None:
        path = path.with_name("__main__.py")
    return path if path.is_file() and path.suffix == ".py" else None


def test_every_python_m_path_in_the_docs_is_a_module_file():
    """Each `python -m rlhf_scratch.X` a reader copies from README.md, CONTRIBUTING.md or docs/ runs a
    file of the package (go-to-definition finds it); the files are found, not run."""
    found = {path: doc for doc in DOCS for path in python_m_paths(doc.read_text())}
    assert "rlhf_scratch.train" in found and "rlhf_scratch.exact" in found, sorted(found)
    missing = [f"{doc.relative_to(ROOT)}: python -m {path}" for path, doc in sorted(found.items())
               if runnable_file(path) is None]
    assert not missing, "documented `python -m` paths with no module file:\n" + "\n".join(missing)


@pytest.mark.parametrize(("text", "ok"), [
    ("    python -m rlhf_scratch.train sentiment --algo rloo\n", True),
    ("Run `python -m rlhf_scratch.no_such_command --help`.\n", False),
    ("torchrun --nproc-per-node 2 -m rlhf_scratch.loop sentiment\n", False),  # an old path with no file
    ("python -m rlhf_scratch.commands\n", False),  # a package without __main__.py
])
def test_a_planted_documented_path_with_no_file_is_found(text, ok):
    assert all(runnable_file(path) is not None for path in python_m_paths(text)) is ok
