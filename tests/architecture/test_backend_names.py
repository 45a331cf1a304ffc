"""Backends own what other layers branch on: outside runtime/backends/ (the runtime's backend objects) and
core/backends.py (their traits, the data the planner and the core types read) no module of the package
compares a backend's name. A new backend then joins in those two places, not in every layer.

What counts, read from each module's syntax tree (docs/architecture.md, "The session contract"):

- a comparison (``==``, ``!=``, ``in``, ``not in``) of a backend's name (``"torch"``, ``"llama.cpp"``, or a
  literal tuple, list or set holding one) with an expression that holds a backend's name: one named
  ``backend`` (``profile.backend``, ``target.backend``, ``args.backend``, ...) or a device's ``source``
  (where a profile records the backend that measured it);
- a comparison with ``"torch"`` whatever the other side (no serving engine or bench method has that name);
- ``startswith`` / ``endswith`` of such an expression with the start or end of a backend's name;
- a dict literal keyed by backends' names: a table of behaviour per backend (a table of package versions
  keyed by ``"torch"`` alone is not one).

Comparisons of the serving engines' names (planner/export/: ``--engine llama.cpp`` exports to llama-server),
of the bench's llama-cpp-python peers (``llama.cpp``, ``llama.cpp-lookup``) and of ``--flash-attention
llama.cpp`` (llama.cpp's own choice) name other things and are not counted.
"""

from __future__ import annotations

import ast
from pathlib import Path

from specplan.core.backends import BACKEND_NAMES

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ("core", "planner", "models", "quant", "runtime", "profiler", "bench", "distill", "serve", "cli")
OWNERS = (ROOT / "runtime" / "backends", ROOT / "core" / "backends.py")
ALWAYS_A_BACKEND = "torch"
HOLDERS = ("backend", "source")  # an expression whose last name is one of these holds a backend's name


def package_sources() -> list[Path]:
    """Every module of the package but the owners: the layers' folders and specplan/'s own files (its
    links to the layers are not followed twice)."""
    files = [path for layer in LAYERS for path in (ROOT / layer).rglob("*.py")] + sorted((ROOT / "specplan").glob("*.py"))
    return [path for path in files if not any(path == owner or owner in path.parents for owner in OWNERS)]


def _names(node: ast.AST) -> set[str]:
    """The backend names ``node`` spells: a string literal, or the literals of a tuple, list or set."""
    values = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return {value.value for value in values if isinstance(value, ast.Constant) and value.value in BACKEND_NAMES}


def _holds_backend(node: ast.AST) -> bool:
    """Whether ``node`` is an expression that holds a backend's name (``x.backend``, ``backend``, ``x.source``)."""
    last = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
    return any(last == holder or last.endswith("_" + holder) for holder in HOLDERS)


def _compares_backend(node: ast.Compare) -> bool:
    operands = [node.left, *node.comparators]
    spelled = [_names(operand) for operand in operands]
    if any(ALWAYS_A_BACKEND in names for names in spelled):
        return True
    return any(names for names in spelled) and any(_holds_backend(operand) for operand in operands)


def _affix_of_backend(node: ast.Call) -> bool:
    """``x.backend.startswith("llama")`` and the like."""
    function = node.func
    if not (isinstance(function, ast.Attribute) and function.attr in ("startswith", "endswith")):
        return False
    affixes = [argument.value for argument in node.args if isinstance(argument, ast.Constant)
               and isinstance(argument.value, str)]
    spelled = any(name.startswith(affix) or name.endswith(affix) for affix in affixes if affix for name in BACKEND_NAMES)
    return spelled and _holds_backend(function.value)


def _keyed_by_backend(node: ast.Dict) -> bool:
    keys = {key.value for key in node.keys if isinstance(key, ast.Constant)}
    return len(keys & set(BACKEND_NAMES)) > 1


def backend_name_branches(source: str) -> list[int]:
    """The line of every backend-name comparison in a module's ``source`` (the module docstring's list)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Compare) and _compares_backend(node)) or \
                (isinstance(node, ast.Call) and _affix_of_backend(node)) or \
                (isinstance(node, ast.Dict) and _keyed_by_backend(node)):
            lines.append(node.lineno)
    return sorted(lines)


def test_the_check_finds_each_spelling():
    spellings = ['if profile.backend == "llama.cpp": pass', 'x = a if target.backend != "torch" else b',
                 'if args.backend in ("llama.cpp", "other"): pass', 'if self.device.source == "llama.cpp": pass',
                 'if kind == "torch": pass', 'if runner.backend.startswith("llama"): pass',
                 'TABLE = {"torch": 1, "llama.cpp": 2}',
                 'if session_backend == "llama.cpp": pass']
    assert [bool(backend_name_branches(line)) for line in spellings] == [True] * len(spellings)
    others = ['if engine.name == "llama.cpp": pass', 'if "llama.cpp" in wanted: pass',
              'if settings.flash_attention == "llama.cpp": pass', 'if name.startswith("llama.cpp"): pass',
              'ENGINES = {"llama.cpp": 1, "vllm": 2}',
              'software = {"specplan": "1", "torch": "2"}']
    assert [bool(backend_name_branches(line)) for line in others] == [False] * len(others)


def test_no_module_outside_the_backends_compares_a_backend_name():
    found = [f"{path.relative_to(ROOT)}:{line}" for path in package_sources()
             for line in backend_name_branches(path.read_text())]
    assert found == [], ("these lines branch on a backend's name; ask the backend instead (core/backends.py "
                         "traits, runtime/backends/ objects): " + ", ".join(found))
