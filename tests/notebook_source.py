"""A lab's answers as code: read a function out of a solution notebook, compare it with the
library's.

A lab's reference answer and the library function it blocks are the same code. Two
functions are the same code when their syntax trees are, once the docstring, the type
annotations and the decorators (``@lab_answer``: the mark of an answer, not its code) are
set aside (comments are not in the tree): the same name, arguments, defaults and
statements.

    answer = answer_function(SOLUTIONS / "lab02_messages" / "lab02_messages.ipynb",
                             "broadcast_binomial")
    assert code(answer) == code(basic.broadcast_binomial)   # a readable diff when not
"""

from __future__ import annotations

import ast
import copy
import inspect
import json
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

SOLUTIONS = Path(__file__).parents[1] / "solutions"


def answer_function(notebook: Path, name: str) -> ast.FunctionDef:
    """The function ``name`` defined at the top level of a code cell of ``notebook``."""
    for cell in json.loads(Path(notebook).read_text())["cells"]:
        if cell["cell_type"] == "code":
            for node in ast.parse("".join(cell["source"])).body:
                if isinstance(node, ast.FunctionDef) and node.name == name:
                    return node
    raise LookupError(f"{notebook} defines no function {name!r}")


def library_function(function: Callable[..., Any]) -> ast.FunctionDef:
    """The syntax tree of a Python function (or method) of the library."""
    node = ast.parse(textwrap.dedent(inspect.getsource(function))).body[0]
    assert isinstance(node, ast.FunctionDef), f"{function!r} is not a plain function"
    return node


def bare(function: ast.FunctionDef | Callable[..., Any]) -> ast.FunctionDef:
    """A copy of the function's tree without its docstring, type annotations and
    decorators."""
    tree = copy.deepcopy(function if isinstance(function, ast.FunctionDef)
                         else library_function(function))
    first = tree.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
            and isinstance(first.value.value, str):
        tree.body = tree.body[1:]
    tree.returns, tree.decorator_list = None, []
    for node in ast.walk(tree):
        if isinstance(node, ast.arg):
            node.annotation = None
    return tree


def code(function: ast.FunctionDef | Callable[..., Any]) -> str:
    """The function as source, without docstring, comments and annotations: compare two of
    these for a readable diff."""
    return ast.unparse(bare(function))


def same_code(a: ast.FunctionDef | Callable[..., Any],
              b: ast.FunctionDef | Callable[..., Any]) -> bool:
    """True when ``a`` and ``b`` (trees or functions) are the same code."""
    return ast.dump(bare(a)) == ast.dump(bare(b))
