"""Check that unilab's imports point down the layers (`make lint` runs this).

Layers, lowest first (an import may go to its own layer or any lower one, never up):

    base (unilab, unilab.registry, unilab.utils) → config → sim → robots → tasks → runtime
    → policies → algos → train → tools (export, deploy, viz, data, envs, teleop, worldmodel)
    → workflows → cli (unilab.cli, unilab.bench)

Every `import` and `from ... import` counts: at module level, inside functions, and under
`if TYPE_CHECKING:` (a type-only edge is still a dependency). The top-level folders that are
linked into the package (robots/, tasks/, policies/, teleop/, worldmodel/, bench/) are read
as `unilab.<folder>`.

    python tools/check_layers.py [ROOT]     # exit 1 and one line per wrong-way import
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("base", ("unilab", "unilab.registry", "unilab.utils")),
    ("config", ("unilab.config",)),
    ("sim", ("unilab.sim",)),
    ("robots", ("unilab.robots",)),
    ("tasks", ("unilab.tasks",)),
    ("runtime", ("unilab.runtime",)),
    ("policies", ("unilab.policies",)),
    ("algos", ("unilab.algos",)),
    ("train", ("unilab.train",)),
    (
        "tools",
        (
            "unilab.export",
            "unilab.deploy",
            "unilab.viz",
            "unilab.data",
            "unilab.envs",
            "unilab.teleop",
            "unilab.worldmodel",
        ),
    ),
    ("workflows", ("unilab.workflows",)),
    ("cli", ("unilab.cli", "unilab.bench")),
]

LINKED = ("robots", "tasks", "policies", "teleop", "worldmodel", "bench")
"""Top-level folders imported as unilab.<folder> (unilab/<folder> is a symlink to them)."""

ALLOWED: dict[tuple[str, str], str] = {}
"""(importing module, imported module) pairs that may point up, each with its reason."""


@dataclass(frozen=True)
class Violation:
    path: Path
    line: int
    source: str
    target: str
    source_layer: str
    target_layer: str

    def __str__(self) -> str:
        return (
            f"{self.path}:{self.line}: {self.source} ({self.source_layer}) imports "
            f"{self.target} ({self.target_layer}), a higher layer"
        )


def layer_of(module: str) -> tuple[int, str] | None:
    """(index, name) of the layer holding `module` (longest matching package), or None."""
    best: tuple[int, int, str] | None = None
    for index, (name, packages) in enumerate(LAYERS):
        for package in packages:
            # The root package holds only itself: a new subpackage must be given a layer.
            inside = package != "unilab" and module.startswith(package + ".")
            if (module == package or inside) and (best is None or len(package) > best[0]):
                best = (len(package), index, name)
    return None if best is None else (best[1], best[2])


def module_files(root: Path) -> Iterator[tuple[str, Path]]:
    """(module name, path) of every Python file of the package, linked folders included."""
    package = root / "unilab"
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package)
        if rel.parts[0] in LINKED:  # the symlinked copies; read from the real folders below
            continue
        yield _name("unilab", rel), path
    for folder in LINKED:
        base = root / folder
        if base.is_dir():
            for path in sorted(base.rglob("*.py")):
                yield _name(f"unilab.{folder}", path.relative_to(base)), path


def _name(prefix: str, rel: Path) -> str:
    parts = list(rel.with_suffix("").parts)
    if parts and parts[-1] == "__init__":
        parts.pop()
    return ".".join([prefix, *parts])


def imported_modules(tree: ast.AST, module: str, is_package: bool) -> Iterator[tuple[int, str]]:
    """(line, module) for every unilab import anywhere in the file."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "unilab" or alias.name.startswith("unilab."):
                    yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = module.split(".")
                keep = len(base_parts) - node.level + (1 if is_package else 0)
                base = ".".join(base_parts[:keep])
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            if not (target == "unilab" or target.startswith("unilab.")):
                continue
            if target == "unilab":  # `from unilab import tasks` imports unilab.tasks
                for alias in node.names:
                    sub = f"unilab.{alias.name}"
                    # a submodule (unilab.tasks) or a plain attribute (unilab.__version__)
                    layer = layer_of(sub)
                    yield node.lineno, sub if layer not in (None, layer_of("unilab")) else target
            else:
                yield node.lineno, target


def check(root: Path) -> tuple[list[Violation], list[str]]:
    """Wrong-way imports, and problems (files in no layer, stale allowlist entries)."""
    violations: list[Violation] = []
    problems: list[str] = []
    used: set[tuple[str, str]] = set()
    for module, path in module_files(root):
        source = layer_of(module)
        if source is None:
            problems.append(f"{path}: module {module} is in no layer; add it to LAYERS")
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        for line, target in imported_modules(tree, module, path.name == "__init__.py"):
            dest = layer_of(target)
            if dest is None:
                problems.append(f"{path}:{line}: {target} is in no layer; add it to LAYERS")
            elif dest[0] > source[0]:
                if (module, target) in ALLOWED:
                    used.add((module, target))
                    continue
                violations.append(Violation(path, line, module, target, source[1], dest[1]))
    for pair in sorted(set(ALLOWED) - used):
        problems.append(f"allowlist entry {pair} no longer matches an import; remove it")
    return violations, problems


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    root = Path(args[0]) if args else Path(__file__).resolve().parent.parent
    violations, problems = check(root)
    for item in [*violations, *problems]:
        print(item)
    if violations or problems:
        print(
            f"{len(violations)} wrong-way import(s), {len(problems)} problem(s); layers: "
            + " → ".join(name for name, _ in LAYERS)
        )
        return 1
    print(f"import layers ok ({len(ALLOWED)} allowlisted pending edge(s))")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
