"""The package's modules import one way: no module reaches itself through its imports (lazy ones included)."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "xmtc"


def _module(path: Path) -> str:
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Module -> the xmtc modules it imports anywhere in its body, lazily too (a package's ``__init__`` counts as
    the package; ``from . import x`` as the submodule when there is one)."""
    modules = {_module(p): p for p in PKG.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        out = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    if list((PKG.parent / sub.replace(".", "/")).parent.glob(f"{alias.name}.*.so")):
                        continue  # a compiled extension (xmtc._native): imports nothing of ours
                    target = sub if sub in modules else base
                    if target in modules and target != name:
                        out.add(target)
            elif isinstance(node, ast.Import):
                out |= {a.name for a in node.names if a.name in modules and a.name != name}
        graph[name] = out
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_a_planted_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_open_world_modules_do_not_import_the_model_shell_back():
    graph = import_graph()
    for name in ("calibration", "learning", "open_labels", "label_route", "route_prior", "memory", "calibrated_fit"):
        assert "xmtc.models.base" not in graph[f"xmtc.models.{name}"], name
    assert {"xmtc.models.calibration", "xmtc.models.open_labels"} <= graph["xmtc.models.base"]


def test_no_import_cycle_in_the_package():
    """The last circle was models.base <-> calibration / learning / open_labels (each imported the shell back
    for a helper: as_label_matrix now lives in data.dataset, apply_threshold in models.topk)."""
    assert cycles(import_graph()) == []
