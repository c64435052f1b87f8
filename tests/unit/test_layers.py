"""The layering is a rule, not a habit: a module never imports a layer above it.

    config (0) < core, pages (1) < models (2) < rollout (3) < reward (4) < engine (5)
    < algorithms (6) < controller (7) < interp, microscope (8) < course (9) < studies (10) < commands (11)
    < the command paths (rlhf_scratch/train.py, ...: `python -m rlhf_scratch.train`)

Every import counts, a function's own included (a lazy import is still a dependency). `from
rlhf_scratch import NAME` counts as the layer that defines NAME. docs/architecture.md draws it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import rlhf_scratch

ROOT = Path(__file__).resolve().parents[2]
RANK = {
    "config": 0, "core": 1, "pages": 1, "models": 2, "rollout": 3, "reward": 4, "engine": 5,
    "algorithms": 6, "controller": 7, "interp": 8, "microscope": 8, "course": 9, "studies": 10, "commands": 11,
}
FACADE = {"rlhf_scratch/__init__.py"}
"""The public names (imported on first use): above every layer, imported by none."""
ENTRIES = sorted(p.stem for p in (ROOT / "rlhf_scratch").glob("*.py") if p.name != "__init__.py")
"""The documented command paths (`python -m rlhf_scratch.train`: rlhf_scratch/train.py), each a file at the
top of the package that runs one command's main: the top of the house, imported by none."""
ENTRY = "entry"
RANK[ENTRY] = max(RANK.values()) + 1


def layer_of(module: str) -> str | None:
    """The layer of a dotted module name (None: not ours)."""
    parts = module.split(".")
    if parts[0] == "interp":
        return "interp"
    if parts[0] != "rlhf_scratch" or len(parts) < 2:
        return None
    return ENTRY if parts[1] in ENTRIES else parts[1]


def imported_modules(source: str, package: str) -> list[tuple[int, str]]:
    """(line, dotted module) of every import in `source`, relative ones resolved against `package`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            if base == "rlhf_scratch":  # the facade: each name counts as the module that defines it
                for alias in node.names:
                    target = rlhf_scratch._EXPORTS.get(alias.name)
                    found.append((node.lineno, f"rlhf_scratch.{target}" if target else f"rlhf_scratch.{alias.name}"))
            else:
                found.append((node.lineno, base))
    return found


def upward_imports(path: str, source: str) -> list[str]:
    """Each import of `source` (the file at repo-relative `path`) that climbs to a higher layer."""
    module = path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
    own = layer_of(module)
    if own not in RANK:
        return [f"{path}: not in a layer (RANK names every folder of rlhf_scratch/)"]
    bad = []
    for line, target in imported_modules(source, module if path.endswith("__init__.py") else module.rpartition(".")[0]):
        other = layer_of(target)
        if other is None or other == own:
            continue
        if other not in RANK:
            bad.append(f"{path}:{line} imports {target}: not in a layer")
        elif RANK[other] > RANK[own]:
            bad.append(f"{path}:{line} imports {target} ({other}, layer {RANK[other]}) from {own} (layer {RANK[own]})")
    return bad


def module_of(path: str) -> str:
    """The dotted module of a repo-relative file (a package's __init__.py is the package)."""
    return path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def import_graph(sources: dict[str, str]) -> dict[str, dict[str, int]]:
    """module -> {module of ours it imports: the line}, over `sources` (repo-relative path -> text).
    An import names the module file it loads: `from pkg import sub` is pkg.sub when that is a module
    of ours, `import a.b.c` the deepest of a.b.c, a.b, a that is ours; `from rlhf_scratch import NAME`
    the module that defines NAME. Every import counts, a function's own and a type checker's too."""
    modules = {module_of(path): path for path in sources}

    def ours(dotted: str) -> str | None:
        while dotted and dotted not in modules:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    graph: dict[str, dict[str, int]] = {}
    for path, source in sources.items():
        module = module_of(path)
        package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
        edges = graph.setdefault(module, {})
        for node in ast.walk(ast.parse(source)):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
                for alias in node.names:
                    if base == "rlhf_scratch" and alias.name in rlhf_scratch._EXPORTS:  # the facade
                        targets.append(f"rlhf_scratch.{rlhf_scratch._EXPORTS[alias.name]}")
                    else:
                        targets.append(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
            for target in targets:
                if (found := ours(target)) is not None and found != module:
                    edges.setdefault(found, node.lineno)
    return graph


def import_cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Every set of two or more modules that import one another, round a circle (the strongly
    connected components of `graph`, Tarjan's), each sorted; a module-level import or a function's."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []

    def visit(v: str) -> None:  # (recursion depth: the longest import chain, a few dozen)
        index[v] = low[v] = len(index)
        stack.append(v), on_stack.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(cycles)


def describe_cycle(graph: dict[str, dict[str, int]], cycle: list[str], paths: dict[str, str]) -> str:
    """A circle in words: each import between its modules, with its file and line."""
    inside = set(cycle)
    return "; ".join(f"{paths[a]}:{line} imports {b}" for a in cycle for b, line in sorted(graph[a].items())
                     if b in inside)


def algorithm_of(module: str) -> str | None:
    """The algorithm folder a module is in (`rlhf_scratch.algorithms.ppo.trainer` -> ppo), else None."""
    parts = module.split(".")
    return parts[2] if parts[:2] == ["rlhf_scratch", "algorithms"] and len(parts) > 2 else None


def cross_algorithm_imports(graph: dict[str, dict[str, int]], paths: dict[str, str]) -> list[str]:
    """Each import of one algorithm's folder from another's: siblings share `core`, `rollout` and the
    engine, never each other."""
    return [f"{paths[a]}:{line} imports {b} ({algorithm_of(b)}) from {algorithm_of(a)}"
            for a, edges in sorted(graph.items()) for b, line in sorted(edges.items())
            if algorithm_of(a) and algorithm_of(b) and algorithm_of(a) != algorithm_of(b)]


def house_problems(sources: dict[str, str]) -> list[str]:
    """What the import order allows but a house without a loop does not: circles, one algorithm
    importing another."""
    graph = import_graph(sources)
    paths = {module_of(path): path for path in sources}
    return ([f"import cycle of {len(c)} modules: {describe_cycle(graph, c, paths)}" for c in import_cycles(graph)]
            + cross_algorithm_imports(graph, paths))


def package_files() -> list[Path]:
    files = sorted((ROOT / "rlhf_scratch").rglob("*.py")) + sorted((ROOT / "interp").rglob("*.py"))
    return [f for f in files if str(f.relative_to(ROOT)) not in FACADE]


def test_no_module_imports_a_layer_above_it():
    bad = [b for f in package_files() for b in upward_imports(str(f.relative_to(ROOT)), f.read_text())]
    assert not bad, "upward imports:\n" + "\n".join(bad)


def test_no_import_cycle_and_no_algorithm_imports_another():
    """Inside a folder or across, of equal rank or not: no two modules import each other, directly or
    round a longer circle (a lazy import included: it is the same knot, only tied later)."""
    sources = {str(f.relative_to(ROOT)): f.read_text() for f in package_files()}
    bad = house_problems(sources)
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize(("sources", "culprit"), [
    ({"rlhf_scratch/engine/runs.py": "from rlhf_scratch.engine.checkpoint import list_checkpoints\n",
      "rlhf_scratch/engine/checkpoint.py": "def f():\n    from rlhf_scratch.engine.runs import read_status\n"},
     "import cycle of 2 modules"),  # equal rank, one side lazy
    ({"rlhf_scratch/studies/a.py": "from rlhf_scratch.studies import b\n",
      "rlhf_scratch/studies/b.py": "from . import c\n",
      "rlhf_scratch/studies/c.py": "import rlhf_scratch.studies.a\n"},
     "import cycle of 3 modules"),  # round a longer circle, through a relative import
    ({"rlhf_scratch/studies/hacking/watch.py": "from rlhf_scratch.studies.overoptimization.run import STUDY_METRICS\n",
      "rlhf_scratch/studies/overoptimization/run.py": "def f():\n    from rlhf_scratch.studies.hacking.watch import W\n"},
     "import cycle of 2 modules"),  # across two folders
    ({"rlhf_scratch/core/memory.py": "from rlhf_scratch import calc_kl_penalty\n",
      "rlhf_scratch/core/objectives.py": "from rlhf_scratch.core.memory import ReplayMemory\n"},
     "import cycle of 2 modules"),  # through the facade's name
    ({"rlhf_scratch/algorithms/grpo/loss.py": "from rlhf_scratch.algorithms.ppo.objective import calc_clipped_sur_obj\n",
      "rlhf_scratch/algorithms/ppo/objective.py": ""},
     "(ppo) from grpo"),  # one algorithm importing another
    ({"rlhf_scratch/algorithms/rloo/trainer.py": "def f():\n    from ..online_dpo import OnlineDPOTrainer\n",
      "rlhf_scratch/algorithms/online_dpo/__init__.py": ""},
     "(online_dpo) from rloo"),
])
def test_a_planted_cycle_or_cross_algorithm_import_is_found(sources, culprit):
    bad = house_problems(sources)
    assert len(bad) == 1 and culprit in bad[0], bad


def test_a_chain_without_a_circle_passes():
    sources = {"rlhf_scratch/engine/checkpoint.py": "from rlhf_scratch.engine.runs import read_status\n",
               "rlhf_scratch/engine/runs.py": "from rlhf_scratch.config import ConfigError\n",
               "rlhf_scratch/config/__init__.py": "",
               "rlhf_scratch/algorithms/ppo/trainer.py": "from rlhf_scratch.algorithms import lazy_package\n"
                                                         "from rlhf_scratch.algorithms.ppo.args import RLHFArgs\n",
               "rlhf_scratch/algorithms/ppo/args.py": "", "rlhf_scratch/algorithms/__init__.py": ""}
    assert house_problems(sources) == []


def test_every_folder_is_a_layer():
    folders = {p.name for p in (ROOT / "rlhf_scratch").iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders - {"assets"} == set(RANK) - {"interp", ENTRY}


ENTRY_SHAPE = re.compile(r'"""[^"]+"""\n\nimport sys\n\nfrom ([\w.]+) import main\n\n'
                         r'if __name__ == "__main__":\n    sys\.exit\(main\(\)\)\n')


def test_a_module_at_the_top_is_a_command_path_and_nothing_else():
    """A file beside rlhf_scratch/__init__.py holds no code of its own: a docstring, the `main` of the
    command `rlhf` runs under its name (commands/main.py's COMMANDS), and the `python -m` guard."""
    from rlhf_scratch.commands.main import COMMANDS

    assert "train" in ENTRIES and "exact" in ENTRIES, ENTRIES
    for name in ENTRIES:
        shape = ENTRY_SHAPE.fullmatch((ROOT / "rlhf_scratch" / f"{name}.py").read_text())
        assert shape, f"rlhf_scratch/{name}.py: not a command path (a docstring, `from X import main`, the guard)"
        assert shape.group(1) == COMMANDS[name.replace("_", "-")][0], (name, shape.group(1))


@pytest.mark.parametrize(("path", "source", "culprit"), [
    ("rlhf_scratch/core/advantages.py", "from rlhf_scratch.engine.loop import run_training\n", "rlhf_scratch.engine.loop"),
    ("rlhf_scratch/models/lora.py", "def f():\n    import rlhf_scratch.rollout.phase\n", "rlhf_scratch.rollout.phase"),
    ("rlhf_scratch/rollout/phase.py", "from rlhf_scratch import RLHFTrainer\n", "rlhf_scratch.algorithms"),
    ("rlhf_scratch/engine/loop.py", "from ..algorithms import ppo\n", "rlhf_scratch.algorithms"),
    ("rlhf_scratch/reward/tasks.py", "from interp import logits\n", "interp"),
    ("rlhf_scratch/studies/runner.py", "from rlhf_scratch.train import main\n", "rlhf_scratch.train"),
    ("rlhf_scratch/studies/runner.py", "def f():\n    from rlhf_scratch.commands.train import parse_args\n",
     "rlhf_scratch.commands"),  # a study starts runs as processes; it never imports the command layer
])
def test_a_planted_upward_import_is_found(path, source, culprit):
    bad = upward_imports(path, source)
    assert len(bad) == 1 and culprit in bad[0], bad


@pytest.mark.parametrize(("path", "source"), [
    ("rlhf_scratch/engine/loop.py", "from rlhf_scratch.rollout.phase import make_rollout\nfrom rlhf_scratch.engine import runs\n"),
    ("rlhf_scratch/commands/train.py", "from rlhf_scratch.studies import runner\nimport interp.logits\n"),
    ("rlhf_scratch/core/memory.py", "import torch\nfrom rlhf_scratch.config import CommonArgs\n"),
])
def test_a_downward_or_sideways_import_passes(path, source):
    assert upward_imports(path, source) == []
