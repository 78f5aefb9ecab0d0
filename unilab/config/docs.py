"""Read the attribute docstrings of config dataclasses, for `--help` and error messages.

Config fields are documented the way a reader expects, with a string literal under the
field. Python drops those at run time, so we read them back from the source with `ast`.
"""

from __future__ import annotations

import ast
import inspect
import itertools
import textwrap
from functools import cache


@cache
def field_docs(cls: type) -> dict[str, str]:
    """Field name -> docstring for a dataclass and its bases (subclass wins)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass is object:
            continue
        try:
            source = textwrap.dedent(inspect.getsource(klass))
        except (OSError, TypeError):
            continue
        tree = ast.parse(source)
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for node, nxt in itertools.pairwise(body):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant)
                and isinstance(nxt.value.value, str)
            ):
                docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs
