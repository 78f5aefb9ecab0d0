"""Fails if pickle (or another object deserializer), `recv_pyobj`/`send_pyobj` or
`allow_pickle=True` appears on any wire path: the teleop package, the robot drivers and
the simulated robot's camera pipe. Checked on the AST, so comments and docstrings that
name these things do not count, and aliases (`import pickle as p`) do."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WIRE_FILES = sorted(
    [
        *(ROOT / "teleop").rglob("*.py"),
        *(ROOT / "robots").glob("lerobot_*.py"),
        ROOT / "robots" / "interface.py",
        ROOT / "unilab" / "deploy" / "sim_driver.py",
        ROOT / "unilab" / "deploy" / "sim_camera.py",
    ]
)
BANNED_MODULES = {
    "pickle",
    "cPickle",
    "_pickle",
    "dill",
    "cloudpickle",
    "marshal",
    "shelve",
    "jsonpickle",
    "joblib",
}
BANNED_CALLS = {"recv_pyobj", "send_pyobj", "recv_serialized", "loads_pyobj"}


def violations(source: str, name: str = "<src>") -> list[str]:
    out = []
    for node in ast.walk(ast.parse(source, name)):
        if isinstance(node, ast.Import):
            out += [
                f"import {a.name}" for a in node.names if a.name.split(".")[0] in BANNED_MODULES
            ]
        elif (
            isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in BANNED_MODULES
        ):
            out.append(f"from {node.module} import ...")
        elif isinstance(node, ast.Attribute) and node.attr in BANNED_CALLS:
            out.append(f".{node.attr}")
        elif isinstance(node, ast.Name) and node.id in BANNED_CALLS:
            out.append(node.id)
        elif isinstance(node, ast.keyword) and node.arg == "allow_pickle":
            if not (isinstance(node.value, ast.Constant) and node.value.value is False):
                out.append("allow_pickle=<not False>")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "__import__"
        ) and (
            node.args
            and isinstance(node.args[0], ast.Constant)
            and str(node.args[0].value) in BANNED_MODULES
        ):
            out.append(f"__import__({node.args[0].value!r})")
    return out


def test_scanner_catches_each_pattern() -> None:
    for bad in (
        "import pickle",
        "import pickle as p",
        "from pickle import loads",
        "import dill",
        "sock.recv_pyobj()",
        "sock.send_pyobj(x)",
        "np.load(f, allow_pickle=True)",
        "np.load(f, allow_pickle=flag)",
        "__import__('pickle')",
    ):
        assert violations(bad), bad
    assert not violations("np.load(f, allow_pickle=False)\n# pickle recv_pyobj allow_pickle=True")


def test_wire_modules_never_unpickle() -> None:
    assert len(WIRE_FILES) >= 15, WIRE_FILES
    found = {str(p.relative_to(ROOT)): violations(p.read_text(), str(p)) for p in WIRE_FILES}
    assert not {k: v for k, v in found.items() if v}
