"""Attribute docstrings of dataclass fields: the string literal under each field, read from the source.

The config sections document every field where it is declared (PEP 257 attribute docstrings)::

    lr: float = 1.6e-4
    \"\"\"Adam learning rate\"\"\"

Python keeps no trace of these strings at run time, so ``field_docs`` parses the class's source with ``ast``.
Everything that shows a setting to a user (``--help`` texts, ``docs/reference.md``) reads them from here, so a
setting is described once, next to its default.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from functools import cache


@cache
def _own_field_docs(cls: type) -> dict[str, str]:
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):  # made at run time (dataclasses.make_dataclass): no source
        return {}
    body = ast.parse(source).body[0]
    assert isinstance(body, ast.ClassDef)
    docs: dict[str, str] = {}
    for stmt, after in zip(body.body, body.body[1:]):
        if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)):
            docs[stmt.target.id] = " ".join(inspect.cleandoc(after.value.value).split())
    return docs


def field_docs(cls: type) -> dict[str, str]:
    """field name -> its attribute docstring (one line, whitespace collapsed), inherited ones included (the
    nearest class in the MRO wins)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass is not object:
            docs.update(_own_field_docs(klass))
    return docs
