"""Shared test setup: the Hub is never reached, and small random models for unit tests.

The suite in three tiers, one folder each (README "Test" and CONTRIBUTING state their times):
    tests/unit/         functions against hand-worked numbers, no whole run and no process (its conftest
                        fails a test that starts either): the contributor's loop
    tests/integration/  whole runs, commands, resume, the controller, pages (its `slow` tests marked)
    tests/slow/         notebooks, torchrun, the TRL peer check (every test marked slow by this file)
The support modules (toy_algorithm, toy_environment, distributed_worker, kill_sweep, processes) stay in tests/, on sys.path.
"""

import os

# Before transformers / huggingface_hub are imported anywhere: tests never touch the network.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("WANDB_MODE", "disabled")
# The suite runs on two pytest-xdist workers (pyproject's addopts). One torch thread each, and in
# every process they start (runs, torchrun workers, notebook kernels): two workers with two threads
# each on a 2-core machine oversubscribe it, and torch's spinning threads then run many times slower.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["OMP_NUM_THREADS"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402

import rlhf_scratch  # noqa: E402,F401  (silences the HookedTransformer deprecation warning)

if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)


def pytest_collection_modifyitems(config, items):
    """How the two xdist workers share the suite (`--dist loadgroup`): each test file stays on one
    worker (its module fixtures — a trained run, TRL's models, two torchrun launches — made once), but
    each notebook is a group of its own and they are handed out first (05 first: the later notebooks
    run longer), so that the two workers finish together instead of one executing five notebooks at
    the end."""
    for item in items:
        if item.path.parent.name == "slow":  # tests/slow/: the tier is the marker (-m "not slow" leaves it out)
            item.add_marker(pytest.mark.slow)
        notebook = item.path.name == "test_notebooks.py" and "[" in item.nodeid
        item.add_marker(pytest.mark.xdist_group(item.nodeid if notebook else item.path.name))
    notebooks = [item for item in items if item.path.name == "test_notebooks.py"]
    rest = [item for item in items if item.path.name != "test_notebooks.py"]
    items[:] = sorted(notebooks, key=lambda item: item.nodeid, reverse=True) + rest


@pytest.fixture
def tiny_random_lm():
    """A 2-layer random HookedTransformer (vocab 50) for tests that need no tokenizer."""
    from transformer_lens import HookedTransformer, HookedTransformerConfig

    cfg = HookedTransformerConfig(
        n_layers=2, d_model=16, n_ctx=32, d_head=4, n_heads=4, d_mlp=64, d_vocab=50,
        act_fn="gelu", normalization_type="LN", seed=0,
    )
    return HookedTransformer(cfg)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(scope="module")
def one_thread():
    """Toy-sized matrices: on a shared 2-core CPU extra torch threads cost far more than they save."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tuned_ppo_run(tmp_path_factory):
    """A finished 2-phase PPO run on the tiny preset, trained hard enough (lr 1e-2) to differ from
    the reference: for the tools that read run folders (export, sample)."""
    from rlhf_scratch.algorithms.ppo import RLHFTrainer
    from rlhf_scratch.config import make_args

    run_dir = tmp_path_factory.mktemp("runs") / "ppo"
    args = make_args("tiny", total_phases=2, batch_size=8, num_minibatches=2, gen_len=8, warmup_steps=1,
                     base_lr=1e-2, run_dir=str(run_dir), seed=0, threads=1)
    RLHFTrainer(args, quiet=True).train(run_dir)
    return run_dir


@pytest.fixture(scope="session")
def family_folder(tmp_path_factory):
    """family name -> a random-init HF folder of that family (rlhf_scratch.models.families, tiny
    shape), built once per session; `chat=True` gives its tokenizer a ChatML template."""
    from rlhf_scratch.models.families import build_folder

    built: dict[tuple[str, bool], object] = {}

    def get(name: str, chat: bool = False):
        if (name, chat) not in built:
            out = tmp_path_factory.mktemp(f"{name}{'_chat' if chat else ''}") / "model"
            built[name, chat] = build_folder(name, out, chat_template=chat)
        return built[name, chat]

    return get


@pytest.fixture(scope="module")
def local_ray(request):
    """A local Ray instance (2 CPUs) for a module's controller tests, shut down after them with no process
    left behind (asserted). The test module is pickled by value: the workers cannot import it."""
    import time

    import psutil
    import ray

    from rlhf_scratch.controller.ray_trainer import init_ray, shutdown_ray

    init_ray(num_cpus=2)
    ray.cloudpickle.register_pickle_by_value(request.module)
    yield
    shutdown_ray()
    deadline = time.monotonic() + 10
    while (left := [p for p in psutil.Process().children(recursive=True) if p.is_running()]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"ray.shutdown() left processes behind: {[p.name() for p in left]}"
