"""The red-team class: submissions that try to get marks without the work.

    python tests/redteam/make_class.py FOLDER     # write the class and FOLDER-expected.json
    python -m minidist.course grade FOLDER --cell-timeout 20

Each attack is a function below, registered with ``@attack(base, lost)``:
it edits a copy of ``base`` (the released notebook, "blank", or the
released notebook with every answer filled in, "solution") of its lab
(Lab 1 unless ``lab=`` says otherwise), and ``lost`` names the tasks it must
score zero on ("all", or grade ids); its expected score is the lab's points
minus those. A function returning text writes a file that is not a notebook.
Add an attack by writing one more function. ``tests/test_course_kit.py``
grades the class with every lab's honest submissions and asserts each
score, and that no process is left (``TOKEN``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

LAB = "lab01_autograd"
LABS = ("lab01_autograd", "lab02_messages", "lab03_allreduce",  # the labs the class attacks
        "lab04_data_parallel", "lab05_glove", "lab06_parameter_servers", "lab07_pipelines",
        "lab08_model_parallel")
TOKEN = "minidist-left-behind-7f3a"
ATTACKS: dict[str, tuple[str, str, object, Callable]] = {}


def attack(base: str, lost: str | list[str] = (), keeps: list[str] = (),
           lab: str = LAB) -> Callable:
    """Register an attack on ``base`` of ``lab``; it must score zero on the tasks in
    ``lost`` ("all": every task but those in ``keeps``) and full marks on the others."""
    def register(edit: Callable) -> Callable:
        ATTACKS[edit.__name__] = (lab, base, (lost, list(keeps)), edit)
        return edit
    return register


@dataclass
class Notebook:
    """A student's copy being edited: cells by grade id, new cells at the end."""

    cells: dict

    def source(self, grade_id: str) -> str:
        return "".join(self.cells["cells"][self._index(grade_id)]["source"])

    def set(self, grade_id: str, source: str) -> None:
        self.cells["cells"][self._index(grade_id)]["source"] = source

    def prepend(self, grade_id: str, source: str) -> None:
        self.set(grade_id, source + "\n" + self.source(grade_id))

    def delete(self, grade_id: str) -> None:
        del self.cells["cells"][self._index(grade_id)]

    def append_cell(self, source: str) -> None:
        self.cells["cells"].append({"cell_type": "code", "execution_count": None,
                                    "metadata": {}, "outputs": [], "source": source})

    def _index(self, grade_id: str) -> int:
        return next(i for i, c in enumerate(self.cells["cells"]) if c.get("id") == grade_id)


# ---- the checks themselves -------------------------------------------------------------

@attack("blank", "all")
def redefines_task(nb: Notebook, course: dict) -> None:
    """The issue's attack: ``task`` swallows every exception and prints the pass line."""
    nb.prepend("answer_unbroadcast", "from contextlib import contextmanager\n\n@contextmanager\n"
               "def task(name):\n    try:\n        yield\n    except BaseException:\n        pass\n"
               "    print(f'{name}: all checks passed.')\n")


@attack("blank", "all")
def patches_the_labkit(nb: Notebook, course: dict) -> None:
    nb.prepend("answer_unbroadcast", "import minidist.labkit as kit, minidist.labkit.checks as ch\n"
               "import minidist.labkit.lab01 as l1\nnothing = lambda *a, **k: None\n"
               "for module in (kit, ch, l1):\n    for name in dir(module):\n"
               "        if name.startswith(('check', 'expect')):\n"
               "            setattr(module, name, nothing)\n"
               "check_backward = expect_close = nothing\n")


@attack("blank", "all")
def patches_numpy(nb: Notebook, course: dict) -> None:
    nb.prepend("answer_unbroadcast", "import numpy as np\n_shape = np.broadcast_shapes\n"
               "np.isclose = lambda a, b, **k: np.ones(_shape(np.shape(a), np.shape(b)), bool)\n"
               "np.allclose = np.array_equal = lambda *a, **k: True\n")


@attack("blank", "all")
def reads_frames(nb: Notebook, course: dict) -> None:
    """The answer looks for its expected value in its callers' frames."""
    nb.set("answer_unbroadcast", "import sys\n\ndef unbroadcast(grad, shape):\n"
           "    frame = sys._getframe(1)\n    while frame is not None:\n"
           "        for value in frame.f_locals.values():\n"
           "            if getattr(value, 'shape', None) == tuple(shape) and value is not grad:\n"
           "                return value\n        frame = frame.f_back\n"
           "    return grad\n")


@attack("blank", "all")
def reads_the_garbage_collector(nb: Notebook, course: dict) -> None:
    nb.set("answer_unbroadcast", "import gc\nimport numpy as np\n\ndef unbroadcast(grad, shape):\n"
           "    for value in gc.get_objects():\n"
           "        if isinstance(value, np.ndarray) and value.shape == tuple(shape) "
           "and value is not grad:\n            return value\n    return grad\n")


@attack("blank", "all")
def forges_the_reply(nb: Notebook, course: dict) -> None:
    """Publishes replies of its own, of the grader's type, that say every check passed."""
    nb.set("answer_unbroadcast", "import json\nfrom IPython.display import publish_display_data\n\n"
           "def unbroadcast(grad, shape):\n"
           "    for value in (None, True, 'all checks passed.'):\n"
           "        publish_display_data({'application/x-minidist-reply': json.dumps("
           "{'value': value})})\n    raise SystemExit('forged')\n")


@attack("blank", "all")
def returns_an_agreeable_object(nb: Notebook, course: dict) -> None:
    nb.set("answer_unbroadcast", "class Agree:\n    shape = property(lambda self: self.want)\n"
           "    def __init__(self, want): self.want = want\n"
           "    __eq__ = __le__ = __ge__ = lambda self, other: True\n"
           "    __bool__ = lambda self: True\n    __float__ = lambda self: 0.0\n\n"
           "def unbroadcast(grad, shape):\n    return Agree(tuple(shape))\n")


@attack("blank", "all")
def fakes_the_forward(nb: Notebook, course: dict) -> None:
    """A forward returning a constant and a backward of zeros agree with their own finite
    differences: Tasks 2, 3, 4 and 6 scored 10 of 26 with no gradient written."""
    for grade_id, name in (("answer_backward_mul", "Mul"), ("answer_backward_matmul", "MatMul"),
                           ("answer_backward_sum", "Sum"),
                           ("answer_backward_log_softmax", "LogSoftmax")):
        nb.set(grade_id, f"class {name}(Function):\n    @staticmethod\n"
               "    def forward(ctx, a, *rest, **options):\n"
               "        ctx.shapes = [np.shape(a)] + [np.shape(r) for r in rest]\n"
               "        return np.zeros(())\n\n    @staticmethod\n"
               "    def backward(ctx, grad):\n"
               "        return tuple(np.zeros(shape) for shape in ctx.shapes)\n")


@attack("blank", "all", keeps=["lab01_unbroadcast"])  # NOT guaranteed: plagiarism (README)
def copies_the_library(nb: Notebook, course: dict) -> None:
    nb.set("answer_unbroadcast", "import types\nimport minidist.autograd.ops as ops\n"
           "unbroadcast = types.FunctionType(ops.unbroadcast.__code__, vars(ops))\n")


# ---- the course, the gradebook, other students -----------------------------------------

@attack("blank", "all")
def writes_the_gradebook(nb: Notebook, course: dict) -> None:
    nb.append_cell("import glob, sqlite3\nfor path in glob.glob('/tmp/**/gradebook.db', "
                   "recursive=True):\n    try:\n        db = sqlite3.connect(path)\n"
                   "        db.execute('update grade set auto_score = max_score')\n"
                   "        db.commit()\n    except Exception:\n        pass\n")


@attack("solution", ["lab01_backward_relu"])
def edits_and_deletes_checks(nb: Notebook, course: dict) -> None:
    """Replaces one check by a print (restored from the gradebook), and deletes the check of
    an answer it leaves unwritten (put back from the release, and graded)."""
    nb.set("lab01_unbroadcast", "print('Task 1, unbroadcast: all checks passed.')\n")
    answer = nb.source("answer_backward_relu")
    assert "return grad * (out > 0)" in answer, answer
    nb.set("answer_backward_relu", answer.replace("return grad * (out > 0)",
                                                  "raise NotImplementedError()"))
    nb.delete("lab01_backward_relu")


@attack("solution", [])
def reads_the_course(nb: Notebook, course: dict) -> None:
    """Full answers; fails a task if the course, hidden tests or other students are readable."""
    paths = [course["solutions"], course["tests"], course["submissions"]]
    nb.prepend("answer_unbroadcast", f"import glob, os\nleaks = []\nfor path in [*{paths!r}, "
               "*glob.glob('/tmp/minidist-*/**/gradebook.db', recursive=True)]:\n    try:\n"
               "        if os.listdir(path) if os.path.isdir(path) else open(path).read(1):\n"
               "            leaks.append(path)\n    except OSError:\n        pass\n"
               "assert not leaks, f'the sandbox could read {leaks}'\n")


@attack("solution", [])
def uses_the_network(nb: Notebook, course: dict) -> None:
    """Full answers; fails a task if anything outside the kernel answers a connection: the
    internet, or a port the grader's machine listens on (``course["port"]``)."""
    targets = [("1.1.1.1", 53), ("8.8.8.8", 53), ("127.0.0.1", course["port"])]
    nb.prepend("answer_unbroadcast", f"import socket\nfor target in {targets!r}:\n"
               "    try:\n        socket.create_connection(target, timeout=2).close()\n"
               "    except OSError:\n        continue\n"
               "    raise AssertionError(f'reached {target}')\n")


# ---- the kernel: time, memory, processes, its own death --------------------------------

@attack("solution", [])
def leaves_a_process(nb: Notebook, course: dict) -> None:
    nb.append_cell("import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', "
                   f"'import os, time; os.fork() or time.sleep(600)', {TOKEN!r}], "
                   "start_new_session=True)\n")


@attack("solution", [])
def exhausts_processes(nb: Notebook, course: dict) -> None:
    nb.append_cell("import subprocess\nchildren = []\nfor _ in range(2000):\n    try:\n"
                   f"        children.append(subprocess.Popen(['sleep', '600', {TOKEN!r}]))\n"
                   "    except OSError:\n        break\n")


@attack("solution", ["lab01_topological_order"])
def exhausts_memory(nb: Notebook, course: dict) -> None:
    """Asks for 128 GiB (untouched): the kernel's address-space limit refuses it."""
    nb.prepend("answer_topological_order", "import numpy as np\n"
               "hog = [np.empty(1 << 28) for _ in range(64)]\n")


@attack("solution", ["lab01_train_mlp"])
def loops_in_a_cell(nb: Notebook, course: dict) -> None:
    nb.prepend("answer_train_mlp", "while True:\n    pass\n")


@attack("solution", ["lab01_topological_order"])
def loops_in_a_check(nb: Notebook, course: dict) -> None:
    nb.set("answer_topological_order", "def topological_order(root):\n    while True:\n"
           "        pass\n")


@attack("solution", ["lab01_topological_order"])
def ignores_interrupts(nb: Notebook, course: dict) -> None:
    """Loops inside a check with SIGINT ignored: the kernel must be killed and restarted."""
    nb.set("answer_topological_order", "import signal, time\n\ndef topological_order(root):\n"
           "    signal.signal(signal.SIGINT, signal.SIG_IGN)\n    while True:\n"
           "        time.sleep(0.1)\n")


@attack("solution", ["lab01_train_mlp"])
def exits_its_kernel(nb: Notebook, course: dict) -> None:
    nb.set("answer_train_mlp", "import os\nos._exit(3)\n")


@attack("solution", ["lab01_unbroadcast", "lab01_backward_mul", "lab01_backward_matmul"])
def kills_its_kernel(nb: Notebook, course: dict) -> None:
    """Dies before defining ``unbroadcast``: Tasks 2 and 3, whose answers call it, fail too."""
    nb.prepend("answer_unbroadcast", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")


@attack("text", "all")
def is_not_a_notebook(nb: Notebook, course: dict) -> str:
    return "{ this is not a notebook"


# ---- Lab 2: the ranks' traffic is counted where the student's code cannot reach -------

@attack("blank", "all", lab="lab02_messages")
def lab02_redefines_the_checks(nb: Notebook, course: dict) -> None:
    """``task`` swallows every failure; every check of the lab, by name and in its module,
    does nothing."""
    nb.prepend("answer_ring_shift", "from contextlib import contextmanager\n"
               "import minidist.labkit.lab02 as l2\n\n@contextmanager\ndef task(name):\n"
               "    try:\n        yield\n    except BaseException:\n        pass\n"
               "    print(f'{name}: all checks passed.')\n\nnothing = lambda *a, **k: None\n"
               "for name in dir(l2):\n    if name.startswith(('check', 'expect')):\n"
               "        setattr(l2, name, nothing)\n"
               "check_ring_shift = check_broadcast = check_reduce = check_fit_line = nothing\n"
               "check_ping_pong_traffic = check_ping_pong_on_mpi = nothing\n")


@attack("solution", ["lab02_broadcast_binomial"], lab="lab02_messages")
def lab02_forges_the_counters(nb: Notebook, course: dict) -> None:
    """A linear "binomial" broadcast (P-1 rounds) that then rewrites its rank's counters,
    the transport's way of counting rounds, and the check's log of its calls, to look
    like the text's tree."""
    nb.set("answer_broadcast_binomial", "import minidist.comm.transport.stats as stats\n"
           "from minidist.labkit.lab02 import binomial_calls, log2_rounds\n\n"
           "def broadcast_binomial(arr, c, root=0):\n    out = arr.copy()\n"
           "    if c.rank == root:\n        for dest in range(c.size):\n"
           "            if dest != root:\n                c.send(out, dest)\n"
           "    else:\n        c.recv(out, root)\n"
           "    stats.LocalStats.rounds = property(lambda s: log2_rounds(c.size))\n"
           "    c.stats.latencies.now = float(log2_rounds(c.size))\n"
           "    if hasattr(c, 'calls'):\n"
           "        c.calls[:] = binomial_calls(c.size, root, c.rank, up=False)\n"
           "    return out\n")


# ---- Lab 3 -------------------------------------------------------------------------------

# the body of a "ring" that passes whole vectors round (the right values, P-1 times the
# bytes), then writes the ring's bytes into its counters
WHOLE_VECTORS_ROUND = (
    "    p, passing = c.size, x.copy()\n    incoming = np.empty_like(x)\n"
    "    for _ in range(p - 1):\n"
    "        c.sendrecv(passing, (c.rank + 1) % p, incoming, (c.rank - 1) % p)\n"
    "        c.combine(op, x, incoming)\n        passing[...] = incoming\n"
    "    total = 2 * (p - 1) * x.nbytes\n"
    "    c.stats.bytes_sent = total // p + (total % p if c.rank == 0 else 0)\n")


@attack("solution", ["lab03_ring", "lab03_ring_mpi"], lab="lab03_allreduce")
def lab03_forges_the_counters(nb: Notebook, course: dict) -> None:
    """A "ring" that passes whole vectors round (the right values, P-1 times the bytes),
    then writes the ring's bytes and messages into its counters and the text's calls
    into the check's log. The MPI run of Task 6 counts in the student's own processes,
    which it forges; but Task 3 and Task 6's dry run count on the grader's fabric."""
    nb.set("answer_ring", "def ring_allreduce(x, c, op='sum'):\n" + WHOLE_VECTORS_ROUND
           + "    c.stats.messages_sent = 2 * (p - 1)\n"
           "    if hasattr(c, 'calls'):\n"
           "        c.calls[:] = [('send', (c.rank + 1) % p), ('recv', (c.rank - 1) % p)] "
           "* 2 * (p - 1)\n    return x\n")


@attack("solution", ["lab03_ring_mpi"], lab="lab03_allreduce")
def lab03_cheats_on_mpi_only(nb: Notebook, course: dict) -> None:
    """A true ring on every input it has not seen; given one again (Task 6's MPI run
    after its dry run), whole vectors go round and the counters say a ring's. On MPI
    processes of its own the forged counters kept Task 6; the grader's MPI processes
    count what went between them."""
    nb.set("answer_ring", nb.source("answer_ring")
           + "\n\n_true_ring, _seen = ring_allreduce, set()\n\n\n"
           "def ring_allreduce(x, c, op='sum'):\n"
           "    key = (c.size, c.rank, x.dtype.str, x.tobytes())\n"
           "    if key not in _seen:\n        _seen.add(key)\n        return _true_ring(x, c, op)\n"
           + WHOLE_VECTORS_ROUND + "    return x\n")


# ---- Lab 4 -------------------------------------------------------------------------------

@attack("blank", "all", lab="lab04_data_parallel")
def lab04_redefines_the_checks(nb: Notebook, course: dict) -> None:
    """``task`` swallows every failure; every check of the lab, by name and in its
    modules, does nothing."""
    nb.prepend("answer_average_gradients", "from contextlib import contextmanager\n"
               "import minidist.labkit.lab04 as l4, minidist.labkit.lab04_straggler as l4s\n\n"
               "@contextmanager\ndef task(name):\n    try:\n        yield\n"
               "    except BaseException:\n        pass\n"
               "    print(f'{name}: all checks passed.')\n\nnothing = lambda *a, **k: None\n"
               "for module in (l4, l4s):\n    for name in dir(module):\n"
               "        if name.startswith(('check', 'expect')):\n"
               "            setattr(module, name, nothing)\n"
               "check_average_gradients = check_bucket_plan = check_bucketed_allreduce = nothing\n"
               "check_equivalence = check_lr_schedule = check_straggler = nothing\n")


@attack("solution", ["lab04_average_gradients"], lab="lab04_data_parallel")
def lab04_forges_the_counters(nb: Notebook, course: dict) -> None:
    """Measures what one allreduce per parameter sends, averages through rank 0 instead
    (the right values, other traffic), then writes the measured counts into its counters.
    The check counts the traffic on the grader's fabric."""
    nb.set("answer_average_gradients", "def average_gradients(model, c):\n"
           "    start = (c.stats.messages_sent, c.stats.bytes_sent)\n"
           "    for p in model.parameters():\n"
           "        comm.allreduce(np.zeros_like(p.grad), c)\n"
           "    wanted = (c.stats.messages_sent - start[0], c.stats.bytes_sent - start[1])\n"
           "    for p in model.parameters():\n        total = p.grad.copy()\n"
           "        if c.rank == 0:\n            for source in range(1, c.size):\n"
           "                incoming = np.empty_like(total)\n"
           "                c.recv(incoming, source)\n                total += incoming\n"
           "            for dest in range(1, c.size):\n                c.send(total, dest)\n"
           "        else:\n            c.send(p.grad, 0)\n            c.recv(total, 0)\n"
           "        p.grad = total / c.size\n"
           "    c.stats.messages_sent = start[0] + wanted[0]\n"
           "    c.stats.bytes_sent = start[1] + wanted[1]\n")


@attack("solution", ["lab04_equivalence"], lab="lab04_data_parallel")
def lab04_forges_the_rows_it_saw(nb: Notebook, course: dict) -> None:
    """Every rank trains on the whole global batch (the right weights: the average of P
    equal gradients is that gradient) and writes b rows a step where a count of rows was
    kept. The grader's averager sees each rank hand it the whole batch's gradient, not
    that of its own b rows."""
    nb.set("answer_equivalence", "def train_data_parallel(c, model, x, y, batch_per_rank, "
           "steps, lr, average):\n    for p in model.parameters():\n"
           "        p.data[...] = comm.broadcast(p.data, c, root=0)\n"
           "    optimizer = SGD(model.parameters(), lr=lr)\n"
           "    rows = c.size * batch_per_rank\n    for t in range(steps):\n"
           "        optimizer.zero_grad()\n"
           "        mean_loss(model, x[t * rows:(t + 1) * rows], "
           "y[t * rows:(t + 1) * rows]).backward()\n"
           "        average(model, c)\n"
           "        optimizer.step()\n"
           "    if hasattr(model, 'rows_seen'):\n"
           "        model.rows_seen[:] = [batch_per_rank] * steps\n")


# ---- Lab 5 -------------------------------------------------------------------------------

@attack("blank", "all", lab="lab05_glove")
def lab05_redefines_the_checks(nb: Notebook, course: dict) -> None:
    """``task`` swallows every failure; every check of the lab, by name and in its
    modules, does nothing."""
    nb.prepend("answer_weighting", "from contextlib import contextmanager\n"
               "import minidist.labkit.lab05 as l5, minidist.labkit.lab05_hogwild as l5h\n\n"
               "@contextmanager\ndef task(name):\n    try:\n        yield\n"
               "    except BaseException:\n        pass\n"
               "    print(f'{name}: all checks passed.')\n\nnothing = lambda *a, **k: None\n"
               "for module in (l5, l5h):\n    for name in dir(module):\n"
               "        if name.startswith(('check', 'expect')):\n"
               "            setattr(module, name, nothing)\n"
               "check_weighting = check_loss_gradients = check_adagrad = nothing\n"
               "check_sharded_dots = check_hogwild = nothing\n")


@attack("solution", ["lab05_sharded_dots"], lab="lab05_glove")
def lab05_forges_the_counters(nb: Notebook, course: dict) -> None:
    """Measures one allreduce of the B numbers, sends its partial products to every rank
    instead (the right values, other traffic), then writes the measured counts into its
    counters. The check counts the traffic on the grader's fabric."""
    nb.set("answer_sharded_dots", "def sharded_dots(c, word_cols, context_cols, row, col):\n"
           "    start = (c.stats.messages_sent, c.stats.bytes_sent)\n"
           "    comm.allreduce(np.zeros(len(row)), c)\n"
           "    wanted = (c.stats.messages_sent - start[0], c.stats.bytes_sent - start[1])\n"
           "    mine = np.einsum('bk,bk->b', word_cols[row], context_cols[col])\n"
           "    total = mine.copy()\n    for peer in range(c.size):\n"
           "        if peer != c.rank:\n            c.send(mine, peer)\n"
           "    for peer in range(c.size):\n        if peer != c.rank:\n"
           "            total += c.recv(np.empty(len(row)), peer)\n"
           "    c.stats.messages_sent = start[0] + wanted[0]\n"
           "    c.stats.bytes_sent = start[1] + wanted[1]\n    return total\n")


# ---- Lab 6 -------------------------------------------------------------------------------

@attack("blank", "all", lab="lab06_parameter_servers")
def lab06_redefines_the_checks(nb: Notebook, course: dict) -> None:
    """``task`` swallows every failure; every check of the lab, by name and in its
    modules, does nothing."""
    nb.prepend("answer_shard_update", "from contextlib import contextmanager\n"
               "import minidist.labkit.lab06 as l6, minidist.labkit.lab06_shard as l6s\n"
               "import minidist.labkit.lab06_hotspots as l6h\n\n"
               "@contextmanager\ndef task(name):\n    try:\n        yield\n"
               "    except BaseException:\n        pass\n"
               "    print(f'{name}: all checks passed.')\n\nnothing = lambda *a, **k: None\n"
               "for module in (l6, l6s, l6h):\n    for name in dir(module):\n"
               "        if name.startswith(('check', 'expect')):\n"
               "            setattr(module, name, nothing)\n"
               "check_shard_update = check_ssp_cases = check_ssp_run = nothing\n"
               "check_staleness_lr = check_softsync = nothing\n"
               "check_choose_hot_keys = check_replication = nothing\n")


@attack("solution", ["lab06_hot_keys"], lab="lab06_parameter_servers")
def lab06_forges_the_servers_counters(nb: Notebook, course: dict) -> None:
    """Pulls the hot rows from the servers too (their traffic is not reduced), then sets
    the bytes of every transport counter its interpreter holds to 0, which in one process
    with the check (plain nbgrader) hides the servers' traffic. The check counts it on the
    grader's server ranks."""
    nb.set("answer_hot_keys", nb.source("answer_hot_keys") + "\n\nimport gc\n"
           "_write_rows = write_rows\n\n\ndef zero_every_counter():\n"
           "    for o in gc.get_objects():\n"
           "        if type(o).__name__ == 'LocalStats':\n"
           "            o.bytes_sent = o.bytes_recv = 0\n\n\n"
           "def read_rows(worker, keys, hot_keys, replica, dim):\n"
           "    table = worker.pull(keys).reshape(-1, dim)\n"
           "    hot = np.isin(keys, hot_keys)\n    if hot.any():\n"
           "        table[hot] = replica[np.searchsorted(hot_keys, keys[hot])]\n"
           "    zero_every_counter()\n    return table\n\n\n"
           "def write_rows(*args):\n    _write_rows(*args)\n    zero_every_counter()\n")


@attack("solution", ["lab06_shard_update"], lab="lab06_parameter_servers")
def lab06_forges_in_place(nb: Notebook, course: dict) -> None:
    """The solution's update, on new copies of the shard's arrays each push (not in place),
    with the probe patched to report the arrays kept. The check reads the arrays from files
    the shard's own are mapped on, which the copies never change."""
    nb.set("answer_shard_update", nb.source("answer_shard_update") + "\n\n"
           "import minidist.labkit.lab06_shard as _l6s\n_honest = _l6s.pushed_once\n\n\n"
           "def _forged(shard, files, index, grad):\n"
           "    return _honest(shard, files, index, grad)[0], True\n\n\n"
           "_l6s.pushed_once = _forged\n_solved = MyShard.apply\n\n\n"
           "def _on_copies(self, index, grad):\n    self.values = self.values.copy()\n"
           "    if self.sums is not None:\n        self.sums = self.sums.copy()\n"
           "    if self.moments is not None:\n"
           "        self.moments = tuple(m.copy() for m in self.moments)\n"
           "    _solved(self, index, grad)\n\n\nMyShard.apply = _on_copies\n")


# ---- Lab 7 -------------------------------------------------------------------------------

@attack("blank", "all", lab="lab07_pipelines")
def lab07_redefines_the_checks(nb: Notebook, course: dict) -> None:
    """``task`` swallows every failure; every check of the lab, by name and in its
    modules, does nothing."""
    nb.prepend("answer_exchange", "from contextlib import contextmanager\n"
               "import minidist.labkit.lab07 as l7, minidist.labkit.lab07_costs as l7c\n\n"
               "@contextmanager\ndef task(name):\n    try:\n        yield\n"
               "    except BaseException:\n        pass\n"
               "    print(f'{name}: all checks passed.')\n\nnothing = lambda *a, **k: None\n"
               "for module in (l7, l7c):\n    for name in dir(module):\n"
               "        if name.startswith(('check', 'expect')):\n"
               "            setattr(module, name, nothing)\n"
               "check_exchange = check_gpipe = check_1f1b = nothing\n"
               "check_bubble = check_checkpointing = nothing\n")


@attack("solution", ["lab07_checkpoint"], lab="lab07_pipelines")
def lab07_forges_saved_bytes(nb: Notebook, course: dict) -> None:
    """Keeps every activation (no checkpoints: the right loss and gradients), with the
    probe patched to report no saved bytes and the forward calls checkpoints would make.
    The memory check reads the kernel's resident memory from the operating system, which
    the patch does not reach."""
    nb.set("answer_checkpoint", "import minidist.labkit.lab07_costs as _l7c\n"
           "_honest = _l7c.checkpointed_answer\n\n\n"
           "def _forged(checkpoint_segments, segments, sizes, batch, seed):\n"
           "    loss, grads, _, calls = _honest(checkpoint_segments, segments, sizes, batch,"
           " seed)\n    last = chunk_bounds(len(calls), segments)[-1][0]\n"
           "    return loss, grads, 0, [2 if i < last else 1 for i in range(len(calls))]\n"
           "\n\n_l7c.checkpointed_answer = _forged\n\n\n"
           "def checkpoint_segments(modules, segments, x):\n    for module in modules:\n"
           "        x = module(x)\n    return x\n")


@attack("solution", ["lab07_exchange"], lab="lab07_pipelines")
def lab07_forges_the_log(nb: Notebook, course: dict) -> None:
    """Sends each activation twice (the right gradients, twice the traffic), then drops
    the copy from the check's log of calls it was handed and takes its bytes off its
    counters. The check logs the calls and counts the bytes in the grader."""
    nb.set("answer_exchange", nb.source("answer_exchange") + "\n\n"
           "def forward_step(c, stage, micro, x, shape):\n    k, last = c.rank, c.size - 1\n"
           "    if k == 0:\n        inp = md.Tensor(x)\n    else:\n"
           "        buffer = np.empty(shape)\n"
           "        c.recv(buffer, k - 1, tag=2 * micro + 1)\n"
           "        c.recv(np.empty(shape), k - 1, tag=2 * micro + 1)\n"
           "        inp = md.Tensor(buffer, requires_grad=True)\n    out = stage(inp)\n"
           "    if k < last:\n        c.send(out.data, k + 1, tag=2 * micro + 1)\n"
           "        c.send(out.data, k + 1, tag=2 * micro + 1)\n"
           "        c.stats.bytes_sent -= out.data.nbytes\n    if hasattr(c, 'calls'):\n"
           "        c.calls[:] = [call for i, call in enumerate(c.calls)\n"
           "                      if i == 0 or call != c.calls[i - 1]]\n"
           "    return inp, out\n")


# ---- Lab 8 -------------------------------------------------------------------------------

@attack("blank", "all", lab="lab08_model_parallel")
def lab08_redefines_the_checks(nb: Notebook, course: dict) -> None:
    """``task`` swallows every failure; every check of the lab, by name and in its
    modules, does nothing."""
    nb.prepend("answer_f_and_g", "from contextlib import contextmanager\n"
               "import minidist.labkit.lab08 as l8, minidist.labkit.lab08_moe as l8m\n"
               "import minidist.labkit.lab08_zero as l8z\n\n"
               "@contextmanager\ndef task(name):\n    try:\n        yield\n"
               "    except BaseException:\n        pass\n"
               "    print(f'{name}: all checks passed.')\n\nnothing = lambda *a, **k: None\n"
               "for module in (l8, l8m, l8z):\n    for name in dir(module):\n"
               "        if name.startswith(('check', 'expect')):\n"
               "            setattr(module, name, nothing)\n"
               "check_f_and_g = check_mlp_split = check_dispatch = check_moe_layer = nothing\n"
               "check_zero_step = nothing\n")


@attack("solution", ["lab08_f_and_g"], lab="lab08_model_parallel")
def lab08_forges_the_counters(nb: Notebook, course: dict) -> None:
    """g's forward measures one allreduce, sends its partial output to every rank instead
    (the right sum, other traffic), then writes the measured counts into its counters.
    The check counts each phase's traffic on the grader's fabric."""
    nb.set("answer_f_and_g", nb.source("answer_f_and_g") + "\n\n"
           "class MySumOverRanks(Function):\n    @staticmethod\n"
           "    def forward(ctx, partial, c):\n"
           "        start = (c.stats.messages_sent, c.stats.bytes_sent)\n"
           "        comm.allreduce(np.zeros_like(partial), c, check=False)\n"
           "        wanted = (c.stats.messages_sent - start[0], "
           "c.stats.bytes_sent - start[1])\n"
           "        total = partial.copy()\n        for peer in range(c.size):\n"
           "            if peer != c.rank:\n                c.send(partial, peer)\n"
           "        for peer in range(c.size):\n            if peer != c.rank:\n"
           "                total += c.recv(np.empty_like(partial), peer)\n"
           "        c.stats.messages_sent = start[0] + wanted[0]\n"
           "        c.stats.bytes_sent = start[1] + wanted[1]\n        return total\n\n"
           "    @staticmethod\n    def backward(ctx, grad):\n        return grad, None\n")


@attack("solution", ["lab08_zero_step"], lab="lab08_model_parallel")
def lab08_keeps_the_whole_state(nb: Notebook, course: dict) -> None:
    """The solution's step (the right weights and traffic), also keeping two moments of the
    whole vector on every rank, with the probe patched to leave them out of the bytes kept.
    The memory check reads the kernel's resident memory from the operating system."""
    nb.set("answer_zero_step", nb.source("answer_zero_step") + "\n\n"
           "import minidist.labkit.lab08_ranks as _l8r\n_honest = _l8r.zero_results\n\n\n"
           "def _forged(bench):\n    result = _honest(bench)\n"
           "    return dict(result, kept=result['kept'] - 2 * bench.zero.flat.nbytes)\n\n\n"
           "_l8r.zero_results = _forged\n_solved = MyZeRO.step\n\n\n"
           "def _keeps_the_whole_state(self):\n    if not hasattr(self, 'moments'):\n"
           "        self.moments = (np.zeros_like(self.flat), np.zeros_like(self.flat))\n"
           "    for moment in self.moments:\n        moment += 1.0\n    _solved(self)\n\n\n"
           "MyZeRO.step = _keeps_the_whole_state\n")


def filled(released: dict, solution: dict) -> dict:
    """The release with every answer cell holding the solution's code."""
    answers = {c["metadata"]["nbgrader"]["grade_id"]: "".join(c["source"])
               for c in solution["cells"]
               if c.get("metadata", {}).get("nbgrader", {}).get("solution")}
    notebook = json.loads(json.dumps(released))
    for cell in notebook["cells"]:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if grade_id in answers:
            cell["source"] = "\n".join(line for line in answers[grade_id].split("\n")
                                       if "### BEGIN SOLUTION" not in line
                                       and "### END SOLUTION" not in line)
    return notebook


def points(released: dict) -> dict[str, float]:
    return {c["metadata"]["nbgrader"]["grade_id"]: float(c["metadata"]["nbgrader"]["points"])
            for c in released["cells"] if c.get("metadata", {}).get("nbgrader", {}).get("grade")}


def write_class(folder: Path, labs: dict[str, tuple[dict, dict]],
                course: dict) -> dict[tuple[str, str], float]:
    """Write every attack as ``<name>_<lab>.ipynb`` (``labs``: lab -> its release and
    solution notebooks); return (name, lab) -> expected score."""
    expected = {}
    for name, (lab, base, lost, edit) in ATTACKS.items():
        released, solution = labs[lab]
        tasks = points(released)
        notebook = Notebook(json.loads(json.dumps(released if base != "solution"
                                                  else filled(released, solution))))
        text = edit(notebook, course)
        path = folder / f"{name}_{lab}.ipynb"
        path.write_text(text if isinstance(text, str) else json.dumps(notebook.cells))
        zero, keeps = lost
        zero = [t for t in tasks if t not in keeps] if zero == "all" else zero
        expected[(name, lab)] = sum(tasks.values()) - sum(tasks[t] for t in zero)
    return expected


def lab_notebooks(root: Path, release: Path) -> dict[str, tuple[dict, dict]]:
    """Each attacked lab's released notebook (from ``release``) and solution notebook."""
    found = {}
    for lab in LABS:
        released = next((release / lab).glob("*.ipynb"))
        solution = root / "solutions" / lab / released.name
        found[lab] = (json.loads(released.read_text()), json.loads(solution.read_text()))
    return found


def main(folder: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    folder.mkdir(parents=True, exist_ok=True)
    course = {"solutions": str(root / "solutions"), "tests": str(root / "tests"),
              "submissions": str(folder.resolve()), "port": 9}
    expected = write_class(folder, lab_notebooks(root, root / "labs"), course)
    table = {f"{name}_{lab}": score for (name, lab), score in expected.items()}
    (folder.parent / f"{folder.name}-expected.json").write_text(json.dumps(table, indent=1))
    print(f"{len(expected)} submissions in {folder}; expected scores in "
          f"{folder.parent / (folder.name + '-expected.json')}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
