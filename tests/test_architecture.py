"""The shape docs/architecture.md draws: every import points down the flow, and a real install has every module."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import palimpsa.upgrade
import pytest
from checkpoints import ROOT

# the stages of palimpsa.upgrade in the order the data flows: a module imports only from its own stage or earlier ones
STAGES = ("errors", "io", "model", "convert", "evaluate", "train", "export", "cli")
UPGRADE = ROOT / "upgrade"


def stage_of(parts: tuple[str, ...]) -> str:
    """The stage of a module given by its path below ``upgrade/`` (the package's ``__init__`` stands above all)."""
    return parts[0].removesuffix(".py") if parts != ("__init__.py",) else "__init__"


def imported_stages(path) -> list[tuple[int, str]]:
    """(line, stage) of every import of palimpsa.upgrade in the module at ``path``, lazy ones included."""
    package = list(path.relative_to(UPGRADE).parent.parts)
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package[: len(package) - (node.level - 1)]
            target = base + (node.module.split(".") if node.module else [])
            if not target:  # `from . import x` at the top of the package: x is the module
                target = [alias.name for alias in node.names]
            found.append((node.lineno, target[0]))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("palimpsa.upgrade."):
            found.append((node.lineno, node.module.split(".")[2]))
    return found


def test_every_import_points_down_the_flow():
    upward = []
    for path in sorted(UPGRADE.rglob("*.py")):
        stage = stage_of(path.relative_to(UPGRADE).parts)
        if stage == "__init__":
            continue
        for line, target in imported_stages(path):
            if STAGES.index(target) > STAGES.index(stage):
                upward.append(f"{path.relative_to(ROOT)}:{line}: {stage} imports {target}")
    assert not upward, "\n".join(upward)


def test_the_kernels_import_nothing_of_the_model():
    for path in sorted((ROOT / "kernels").rglob("*.py")):
        tree = ast.parse(path.read_text())
        modules = [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
        assert not [m for m in modules if m.startswith("palimpsa.upgrade")], path


def test_every_package_is_in_the_distribution():
    """setuptools' list of packages (package-dir maps them to the folders): a folder missing from it would be
    missing from a wheel, though an editable install finds it."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    folders = {"palimpsa." + ".".join(init.parent.relative_to(ROOT).parts)
               for root in (ROOT / "upgrade", ROOT / "kernels") for init in root.rglob("__init__.py")}
    assert folders | {"palimpsa"} == listed  # palimpsa/: a namespace holding __main__.py (python -m palimpsa)


@pytest.mark.parametrize("name", palimpsa.upgrade.__all__)
def test_the_short_api_imports(name):
    assert getattr(palimpsa.upgrade, name) is not None


def test_the_package_loads_nothing_heavy_and_registers_with_transformers_in_any_order():
    """``import palimpsa.upgrade`` imports neither torch nor transformers (the command lines parse their arguments
    first), and model type ``palimpsa`` is known to transformers' Auto classes however the two meet: the package
    first, transformers first, or transformers pulled in by one of the package's own modules."""
    build = ("config = AutoConfig.for_model('palimpsa', d_model=16, n_layer=1, vocab_size=32, d_state=8, headdim=8)"
             "\nprint(type(AutoModelForCausalLM.from_config(config)).__name__)")
    auto = "from transformers import AutoConfig, AutoModelForCausalLM"
    snippets = {
        "light": "import sys, palimpsa.upgrade\nassert palimpsa.upgrade.train.__name__ == 'palimpsa.upgrade.train'\n"
                 "print(sorted({'torch', 'transformers'} & set(sys.modules)))",
        "package first": f"import palimpsa.upgrade\n{auto}\n{build}",
        "transformers first": f"{auto}\nimport palimpsa.upgrade\n{build}",
        "through a module": f"from palimpsa.upgrade.convert.loading import load_mamba2\n{auto}\n{build}",
    }
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("TRITON_INTERPRET", None)
    with ThreadPoolExecutor(2) as pool:
        results = dict(zip(snippets, pool.map(
            lambda code: subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env),
            snippets.values())))
    for name, result in results.items():
        assert result.returncode == 0, f"{name}: {result.stderr[-2000:]}"
    assert results["light"].stdout.strip() == "[]"
    assert {results[name].stdout.strip() for name in snippets if name != "light"} == {"PalimpsaForCausalLM"}
    assert set(palimpsa.upgrade.__all__) <= set(dir(palimpsa.upgrade))
