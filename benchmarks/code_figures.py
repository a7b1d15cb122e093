"""Figures of the operator's code, for before/after comparisons of a restructuring.

Usage: .venv/bin/python -m benchmarks.code_figures [--root PATH]   (PATH: a checkout; default this one)

Prints, for ``<root>/operator/glm_operator`` without any test harness in it: production lines, the
largest class (lines, methods), the longest functions, the highest cyclomatic complexities (decision
points + 1, counted on the AST: if/for/while/except/with-items, boolean operators, comprehension
conditions, match cases, conditional expressions), the controller's lines, import cycles between
the package's modules (grimp, which import-linter uses), and the lines that reach into kopf's
private modules. Prints figures, asserts nothing.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

DECISIONS = (
    ast.If, ast.For, ast.AsyncFor, ast.While, ast.ExceptHandler, ast.IfExp, ast.Assert, ast.match_case,
)  # fmt: skip


def complexity(fn: ast.AST) -> int:
    n = 1
    for node in ast.walk(fn):
        if isinstance(node, DECISIONS):
            n += 1
        elif isinstance(node, ast.BoolOp):
            n += len(node.values) - 1
        elif isinstance(node, ast.comprehension):
            n += len(node.ifs)
    return n


def functions(tree: ast.AST) -> list[tuple[str, int, int]]:
    """(qualified name, lines, complexity) of every function, nested ones on their own."""
    out: list[tuple[str, int, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                out.append((name, (child.end_lineno or child.lineno) - child.lineno + 1, complexity(child)))
                visit(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(tree, "")
    return out


def import_cycles(root: Path) -> int:
    try:
        import grimp
    except ImportError:
        return -1
    sys.path.insert(0, str(root / "operator"))
    graph = grimp.build_graph("glm_operator")
    modules = sorted(graph.modules)
    index = {m: i for i, m in enumerate(modules)}
    edges = {m: graph.find_modules_directly_imported_by(m) & set(modules) for m in modules}
    # Tarjan's strongly connected components: each component of more than one module is a cycle.
    counter, stack, on_stack, low, number, cycles = [0], [], set(), {}, {}, 0

    def strongconnect(v: str) -> None:
        nonlocal cycles
        number[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in number:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], number[w])
        if low[v] == number[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles += 1
                print(f"  cycle: {' <-> '.join(sorted(component))}")

    sys.setrecursionlimit(10000)
    for m in modules:
        if m not in number:
            strongconnect(m)
    del index
    return cycles


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    args = ap.parse_args()
    package = args.root / "operator" / "glm_operator"
    files = [p for p in sorted(package.rglob("*.py")) if "testing" not in p.relative_to(package).parts]
    lines = {p: len(p.read_text().splitlines()) for p in files}
    total = sum(lines.values())
    print(f"production lines (operator/glm_operator, no test harness): {total} in {len(files)} files")
    shell = ("controller", "handlers")
    controller = sum(n for p, n in lines.items() if p.relative_to(package).parts[0] in shell)
    print(f"controller and handlers: {controller} lines")
    classes, funcs = [], []
    private_kopf = []
    for path in files:
        text = path.read_text()
        tree = ast.parse(text)
        rel = path.relative_to(package)
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                methods = sum(isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) for n in node.body)
                classes.append(((node.end_lineno or 0) - node.lineno + 1, methods, f"{rel}:{node.name}"))
        funcs += [(n, c, f"{rel}:{name}") for name, n, c in functions(tree)]
        private_kopf += [
            f"{rel}:{i}" for i, line in enumerate(text.splitlines(), 1) if re.search(r"kopf\._", line)
        ]
    classes.sort(reverse=True)
    print("largest classes (lines, methods):", "; ".join(f"{c[2]} {c[0]}/{c[1]}" for c in classes[:3]))
    by_lines = sorted(funcs, reverse=True)[:5]
    print("longest functions (lines):", "; ".join(f"{f[2]} {f[0]}" for f in by_lines))
    by_cc = sorted(funcs, key=lambda f: f[1], reverse=True)[:5]
    print("highest cyclomatic complexity:", "; ".join(f"{f[2]} {f[1]}" for f in by_cc))
    print(f"functions over 80 lines: {sum(1 for f in funcs if f[0] > 80)}")
    print(f"lines reaching into kopf's private modules: {len(private_kopf)} {private_kopf[:5]}")
    cycles = import_cycles(args.root)
    print(f"import cycles between modules: {cycles if cycles >= 0 else 'grimp not installed'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
