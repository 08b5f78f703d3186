"""Lab 1's answers are the library's code: the solution notebook's answer cells and the
library functions that the checks block, compared statement by statement.

Where the library differs (an option the lab leaves out, what makes it fast beneath), a
table names each library line and the answer's lines it stands for; the rest is the same.
"""

from __future__ import annotations

import ast
import inspect
import json
import pkgutil
import re
import textwrap
from pathlib import Path

import pytest

import minidist as md
from minidist.autograd import engine
from minidist.optim import SGD, Adam
from minidist.util.answers import ANSWER_ID, answers_to

SOLUTION = Path(__file__).parents[1] / "solutions" / "lab01_autograd" / "lab01_autograd.ipynb"

# (answer cell, function in it, the library's function): the same statements, the library
# computing through the backend's array module (``xp``) where the lab writes ``np``.
# MatMul.backward is not here: the library's also takes 1-D operands and lays out the
# gradient of a transposed weight as BLAS writes it; Task 3 assumes two axes or more.
SAME_CODE = [
    ("answer_unbroadcast", "unbroadcast", md.autograd.unbroadcast),
    ("answer_backward_mul", "forward", md.autograd.Mul.forward),
    ("answer_backward_mul", "backward", md.autograd.Mul.backward),
    ("answer_backward_matmul", "forward", md.autograd.MatMul.forward),
    ("answer_backward_sum", "forward", md.autograd.Sum.forward),
    ("answer_backward_sum", "backward", md.autograd.Sum.backward),
    ("answer_backward_relu", "forward", md.autograd.ReLU.forward),
    ("answer_backward_relu", "backward", md.autograd.ReLU.backward),
    ("answer_backward_log_softmax", "forward", md.autograd.LogSoftmax.forward),
    ("answer_backward_log_softmax", "backward", md.autograd.LogSoftmax.backward),
    ("answer_topological_order", "topological_order", engine.topological_order),
]

# Where the library's walk differs from Task 8's answer: each library line and the answer's
# lines that it stands for (what lies beneath the walk). Everything else is the same.
BENEATH_THE_WALK = {
    "grads = {id(root): grad}": ["grads = {id(root): np.ones_like(root.data)}"],
    "kept = set()": [],
    "for node in reversed(topological_order(root)):":
        ["for node in reversed(md.autograd.topological_order(root)):"],
    "accumulate_grad(node, grad, kept)":
        ["node.grad = grad.copy() if node.grad is None else node.grad + grad"],
    "input_grads = apply_rule(node._ctx, grad)":
        ["input_grads = node._ctx.fn.backward(node._ctx, grad)",
         "if not isinstance(input_grads, tuple):", "input_grads = (input_grads,)"],
    "if not retain_graph:": [],
    "node._ctx, node._freed = None, True": [],
}


# Tasks 9 and 10: each optimiser's update is the answer's loop for one parameter, run on
# ``blocks`` of it (Optimizer.step skips a parameter without gradient); the answer's
# attributes (``self.lr``) are locals read from the parameter's group. Lines that map to
# nothing are options and state set-up the lab leaves out.
SGD_AS_ANSWERED = {
    'lr, momentum = float(group["lr"]), float(group["momentum"])': [],
    'weight_decay, nesterov = float(group["weight_decay"]), group["nesterov"]': [],
    "if weight_decay:": [],
    "grad = grad + weight_decay * param.data": [],
    "if not momentum:": [],
    "param.data -= lr * grad": [],
    "return": [],
    "if not state:": [],
    'state["momentum_buffer"] = np.zeros_like(param.data)': [],
    'for p, v in blocks(param, grad, state["momentum_buffer"]):':
        ["for p, v in zip(params, velocity):", "if p.grad is None:", "continue"],
    "if nesterov:": [],
    "p.data -= lr * (p.grad + momentum * v)": [],
    "else:": [],
}
ADAM_AS_ANSWERED = {
    'lr, eps = float(group["lr"]), float(group["eps"])': [],
    'weight_decay = float(group["weight_decay"])': [],
    "if weight_decay:": [],
    "grad = grad + weight_decay * param.data": [],
    "if not state:": [],
    'state["step"] = 0': [],
    'state["exp_avg"] = np.zeros_like(param.data)': [],
    'state["exp_avg_sq"] = np.zeros_like(param.data)': [],
    'state["step"] += 1': ["t += 1"],  # each parameter counts its own steps
    't = state["step"]': [],
    'b1, b2 = (float(b) for b in group["betas"])': ["b1, b2 = betas"],
    'for p, m, s in blocks(param, grad, state["exp_avg"], state["exp_avg_sq"]):':
        ["for p, m, s in zip(params, m, s):", "if p.grad is None:", "continue"],
}

# (answer cell, function in it, the library's function, its table)
AS_ANSWERED = [
    ("answer_backward_pass", "backward", engine.backward, BENEATH_THE_WALK),
    ("answer_sgd_momentum", "step", SGD.update, SGD_AS_ANSWERED),
    ("answer_adam", "step", Adam.update, ADAM_AS_ANSWERED),
]


def statements(source: str) -> list[str]:
    """The body of the function ``source`` defines, after its docstring: one entry per
    line, without indentation, comments or blank lines."""
    source = textwrap.dedent(source)
    first = ast.parse(source).body[0].body
    start = first[1 if isinstance(first[0], ast.Expr) else 0].lineno
    lines = source.splitlines()[start - 1:]
    return [line.split("  #")[0].strip() for line in lines
            if line.strip() and not line.strip().startswith("#")]


def cell(grade_id: str) -> str:
    """The source of the solution notebook's cell ``grade_id``."""
    cells = json.loads(SOLUTION.read_text())["cells"]
    return next(c["source"] for c in cells
                if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id)


def answer(grade_id: str, name: str) -> list[str]:
    """The statements of ``name`` in the solution notebook's answer cell ``grade_id``."""
    source = "\n".join(line for line in cell(grade_id).splitlines() if " SOLUTION" not in line)
    node = next(n for n in ast.walk(ast.parse(source))
                if isinstance(n, ast.FunctionDef) and n.name == name)
    return statements(ast.get_source_segment(source, node))


def as_numpy(lines: list[str]) -> list[str]:
    """The library's statements as the lab writes them: ``np`` for the backend's module."""
    lines = [line for line in lines if not re.fullmatch(r"xp = xp_of\([\w.]+\)", line)]
    return [re.sub(r"\bxp_of\([\w.]+\)\.|\bxp\.", "np.", line).replace("_shape(", "np.shape(")
            for line in lines]


@pytest.mark.parametrize("grade_id,name,library", SAME_CODE,
                         ids=[f"{g}.{n}" for g, n, _ in SAME_CODE])
def test_answer_is_the_library_code(grade_id, name, library):
    assert as_numpy(statements(inspect.getsource(library))) == answer(grade_id, name)


@pytest.mark.parametrize("grade_id,name,library,table", AS_ANSWERED,
                         ids=[f"{g}.{n}" for g, n, *_ in AS_ANSWERED])
def test_answer_is_the_library_code_but_its_tabled_lines(grade_id, name, library, table):
    library = as_numpy(statements(inspect.getsource(library)))
    assert set(table) <= set(library), "a line of the table left the library"
    as_answered = [lab for line in library for lab in table.get(line, [line])]
    assert as_answered == [line.replace("self.", "") for line in answer(grade_id, name)]


@pytest.mark.parametrize("grade_id,name,library,table", AS_ANSWERED,
                         ids=[f"{g}.{n}" for g, n, *_ in AS_ANSWERED])
def test_the_check_blocks_that_library_code(grade_id, name, library, table):
    check = cell(grade_id.replace("answer_", "lab01_"))
    targets = re.findall(r"""["'](minidist\.[\w.]+|lab\d\d\w*)["']""", check)
    blocked = [f for t in targets
               for f in (answers_to(t) if ANSWER_ID.fullmatch(t) else [pkgutil.resolve_name(t)])]
    assert library in blocked, f"{grade_id}'s check blocks {targets}"
