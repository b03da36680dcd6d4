"""The layer order (docs/design.md#layers), read from the package's own imports (lazy ones
included).

A module may import its own package and any layer below its own, never a layer above it, nor
a sibling package of its own layer (the ground floor's modules excepted); no two files may import each other, directly or around
a circle. The checker runs on the real tree and on a tiny tree with one upward import, so a
checker that finds nothing cannot pass for a tree that is clean.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Set, Tuple

MINDRL = Path(__file__).resolve().parent.parent / "mindrl"

# Lowest first. Each entry is one layer: mindrl's top-level modules / packages in it.
LAYERS: Tuple[Tuple[str, ...], ...] = (
    ("mindrl", "errors", "processes", "paths", "staging", "shared_memory",
     "device_kinds", "startup"),             # ground floor: everything may import these
    ("platforms",),                          # CPU / device machinery, given what it needs
    ("device",),                             # the one place that knows the accelerator
    ("distributed", "rank_imports"),         # process groups; what spawned ranks import
    ("rewards",),                            # stdlib-only verifiers: config checks their names
    ("config",),
    ("tools",),                              # tool registry, sandbox: the rewards pool runs
                                             # them; config names tools without importing it
    ("algorithms",),                         # pure tensor maths (imports only torch)
    ("models",),
    ("data",),                               # preprocessing uses models' tokenizers
    ("ckpt",),                               # the name/layout tables know the models
    ("engines",),
    ("weight_sync",),
    ("workers",),                            # Ray actors, placement, deadlines
    ("rollout",),                            # engine groups placed by workers' placement
    ("trainer",),
    ("cli_entry",),
)
RANK = {name: i for i, layer in enumerate(LAYERS) for name in layer}
ONLY_TORCH = {"algorithms"}                  # may import nothing of mindrl outside itself


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(module: str, is_package: bool, node: ast.ImportFrom, root: Path) -> List[str]:
    """The mindrl modules an ImportFrom names (`from mindrl.x import y` is module x.y when y is
    a module, else x)."""
    if node.level:
        base = module.split(".")
        base = base[:len(base) - node.level + (1 if is_package else 0)]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    if not target.startswith(root.name):
        return []
    out = []
    for alias in node.names:
        sub = f"{target}.{alias.name}"
        rel = Path(*sub.split(".")[1:])
        is_module = ((root / rel).with_suffix(".py").exists() or (root / rel).is_dir())
        out.append(sub if is_module else target)
    return out


def imports_of(root: Path) -> Dict[str, Set[Tuple[str, int]]]:
    """module -> {(imported mindrl module, line)} for every import statement in the file."""
    graph: Dict[str, Set[Tuple[str, int]]] = {}
    for path in sorted(root.rglob("*.py")):
        module = module_name(path, root)
        found = graph.setdefault(module, set())
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found.update((a.name, node.lineno) for a in node.names
                             if a.name.split(".")[0] == root.name)
            elif isinstance(node, ast.ImportFrom):
                found.update((t, node.lineno)
                             for t in _resolve(module, path.name == "__init__.py", node, root))
    return graph


def top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def layer_violations(root: Path) -> List[str]:
    problems = []
    for module, targets in sorted(imports_of(root).items()):
        src = top(module)
        if src not in RANK:
            problems.append(f"{module}: package {src!r} has no layer in LAYERS (add it where "
                            f"docs/design.md#layers puts it)")
            continue
        for target, line in sorted(targets):
            dst = top(target)
            if dst == src or target == root.name:
                continue
            where = f"{module.replace('.', '/')}.py:{line} imports {target}"
            if src in ONLY_TORCH:
                problems.append(f"{where}: {src}/ imports only torch")
            elif dst not in RANK:
                problems.append(f"{where}: {dst!r} has no layer in LAYERS")
            elif RANK[dst] > RANK[src]:
                problems.append(f"{where}: {src} (layer {RANK[src]}) may not import {dst} "
                                f"(layer {RANK[dst]}, above it): move the shared piece down")
            elif RANK[dst] == RANK[src] and RANK[src] > 0:   # the ground floor shares
                problems.append(f"{where}: {src} and {dst} share a layer and may not import "
                                f"each other")
    return problems


def circles(root: Path) -> List[List[str]]:
    """Every import circle between files (strongly connected components of two or more; a
    package's own __init__ re-exports count as imports)."""
    graph = {m: {t for t, _ in ts} for m, ts in imports_of(root).items()}
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):   # Tarjan, recursive: the graph has ~150 nodes
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
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
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_mindrl_imports_follow_design_layers():
    problems = layer_violations(MINDRL)
    assert not problems, ("imports against the layer order (docs/design.md#layers):\n"
                          + "\n".join(problems))


def test_no_two_mindrl_files_import_each_other():
    found = circles(MINDRL)
    assert not found, "import circles:\n" + "\n".join(" <-> ".join(c) for c in found)


def _tiny_tree(tmp_path: Path) -> Path:
    root = tmp_path / "mindrl"
    for rel, text in {"__init__.py": "", "errors.py": "",
                      "data/__init__.py": "", "data/batch.py": "from mindrl import errors\n",
                      "engines/__init__.py": "", "engines/pad.py": "from .. import errors\n",
                      "algorithms/__init__.py": "", "algorithms/kl.py": "import torch\n"}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_the_checker_names_an_upward_import_a_sibling_and_a_circle(tmp_path):
    root = _tiny_tree(tmp_path)
    assert layer_violations(root) == [] and circles(root) == []
    (root / "data/batch.py").write_text("def f():\n    from mindrl.engines.pad import x\n")
    (root / "algorithms/kl.py").write_text("from mindrl.errors import E\n")
    problems = layer_violations(root)
    assert problems == [
        "mindrl/algorithms/kl.py:1 imports mindrl.errors: algorithms/ imports only torch",
        "mindrl/data/batch.py:2 imports mindrl.engines.pad: data (layer 9) may not import "
        "engines (layer 11, above it): move the shared piece down"], problems
    (root / "engines/pad.py").write_text("from mindrl.engines import loop\n")
    (root / "engines/loop.py").write_text("from . import pad\n")
    assert circles(root) == [["mindrl.engines.loop", "mindrl.engines.pad"]]
