"""The labs as a student meets them: JupyterLab, in headless Chromium.

One JupyterLab server and one Chromium serve every lab. The server runs on a
temporary course folder holding each lab's released notebook with its answer
cells filled from ``solutions/`` (a student's finished copy), and an
``nbgrader_config.py``, which nbgrader's Validate reads from the server's
working directory. For each lab the test drives the app through
``window.jupyterapp`` (``--LabApp.expose_app_in_browser``), JupyterLab's own
commands, rather than through menus:

1. open the notebook and wait until its kernel has answered;
2. run all cells (the ``notebook:run-all-cells`` command, whose promise says
   when the last cell is done), then read the notebook's model: every code
   cell ran, none holds an error, every graded cell printed its task's pass
   line ("Task N, ...: all checks passed.");
3. click nbgrader's Validate button (a real mouse click) and read the dialog it
   opens: "Success! Your notebook passes all the tests."; and the app logged
   no console error meanwhile.

And Validate on an untouched release (the quickest lab's) names every graded
cell as failed, each with its task's "not done yet" sentence.

Every wait polls a state of the page, bounded in time. JupyterLab, its
kernels and the jobs they start, and Chromium are stopped (their whole process
trees) whatever happens. Screenshots: ``build/screenshots/labs/<lab>.png``
(the last graded check and its pass line), ``<lab>_validate.png`` (the
Validate dialog) and ``unfinished_validate.png``. Skipped where no Chromium
or no JupyterLab is installed.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from contextlib import suppress
from pathlib import Path

import browser
import pytest
from test_course_kit import student_copy

from minidist.course.release import nbgrader_env
from minidist.course.settings import LAB_LIMITS, course_root, known_labs, limits_for
from minidist.util.processes import stop_process_tree

ROOT = course_root()
LABS = known_labs(ROOT)
SCREENSHOTS = ROOT / "build" / "screenshots" / "labs"
START_TIMEOUT = 120  # JupyterLab's server, and the app in the page: seconds on a busy machine
PASSED = "all checks passed."
UNFINISHED = "lab05_glove"  # the quickest untouched release to run: it is validated

pytestmark = [
    pytest.mark.skipif(browser.find_chromium() is None,
                       reason="no Chromium on PATH to open JupyterLab "
                              "(Debian: apt-get install chromium)"),
    pytest.mark.slow,
]


def released_notebook(lab: str) -> Path:
    return next((ROOT / "labs" / lab).glob("*.ipynb"))


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    """Every lab's release with its answers filled in, and nbgrader's config for Validate."""
    pytest.importorskip("jupyterlab", reason="JupyterLab is not installed (make test installs "
                                             "the labs extra)")
    pytest.importorskip("nbgrader", reason="nbgrader is not installed")
    folder = tmp_path_factory.mktemp("course")
    for lab in LABS:
        released = released_notebook(lab)
        solution = json.loads(next((ROOT / "solutions" / lab).glob("*.ipynb")).read_text())
        solved = student_copy(json.loads(released.read_text()), solution)
        (folder / lab).mkdir()
        (folder / lab / released.name).write_text(json.dumps(solved, indent=1))
    (folder / "unfinished").mkdir()
    shutil.copy(released_notebook(UNFINISHED), folder / "unfinished")
    timeout = max(limits.cell_timeout_s for limits in LAB_LIMITS.values())
    (folder / "nbgrader_config.py").write_text(
        f"c = get_config()  # noqa: F821\nc.Execute.timeout = {timeout}\n")
    return folder


@pytest.fixture(scope="module")
def jupyterlab(course, tmp_path_factory):
    """JupyterLab on ``course``: its URL and token. Its whole process tree is stopped after."""
    home = tmp_path_factory.mktemp("home")
    settings = home / "config" / "lab" / "user-settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)  # no news toast over the screenshots, no update check offline
    (settings / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    env = nbgrader_env(home) | {"JUPYTER_CONFIG_DIR": str(home / "config"),
                                "JUPYTER_RUNTIME_DIR": str(home / "runtime")}
    log = (home / "jupyterlab.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--allow-root",
         "--ServerApp.ip=127.0.0.1", "--ServerApp.port=0", f"--ServerApp.root_dir={course}",
         "--LabApp.expose_app_in_browser=True"],
        cwd=course, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    stopping: list[threading.Thread] = []  # kernels being shut down
    try:
        info = _server_info(server, home / "runtime")
        yield f"http://127.0.0.1:{info['port']}/", info["token"], stopping
    finally:
        for thread in stopping:
            thread.join(60)
        stop_process_tree(server)
        log.close()


def _server_info(server: subprocess.Popen, runtime: Path) -> dict:
    """The server's port and token, from the file it writes once it listens."""
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"JupyterLab exited with status {server.returncode}")
        for path in runtime.glob("jpserver-*.json"):
            with suppress(json.JSONDecodeError):  # not yet written in full
                return json.loads(path.read_text())
        time.sleep(0.2)
    raise TimeoutError(f"JupyterLab did not start in {START_TIMEOUT} s")


@pytest.fixture(scope="module")
def page():
    pytest.importorskip("websocket", reason="websocket-client drives Chromium's DevTools")
    with browser.Browser(width=1280, height=900) as page:
        yield page


@pytest.fixture
def lab_page(jupyterlab, page):
    """The app freshly loaded in the page; afterwards its kernels are shut down (in the
    background: the server waits for each kernel to exit, which the next lab need not)."""
    url, token, stopping = jupyterlab
    page.open(f"{url}lab?reset&token={token}")  # reset: no tab of an earlier lab restored
    page.wait_for("window.jupyterapp !== undefined", START_TIMEOUT, "JupyterLab's app")
    page.evaluate("jupyterapp.restored.then(() => true)", await_promise=True)
    yield page
    with urllib.request.urlopen(f"{url}api/kernels?token={token}", timeout=30) as reply:
        kernels = [f"{url}api/kernels/{k['id']}?token={token}" for k in json.load(reply)]
    stopping.append(threading.Thread(target=_delete, args=(kernels,)))
    stopping[-1].start()


def _delete(urls: list[str]) -> None:
    for url in urls:
        with suppress(OSError):  # gone already, or the server is stopping
            urllib.request.urlopen(urllib.request.Request(url, method="DELETE"), timeout=60)


def open_notebook(page: browser.Browser, path: str) -> None:
    """Open ``path`` as ``window.__lab`` and wait until its kernel has started and answered."""
    page.evaluate(f"""jupyterapp.commands.execute('docmanager:open', {{path: {json.dumps(path)},
        factory: 'Notebook'}}).then(panel => {{ window.__lab = panel;
        return panel.context.ready.then(() => panel.sessionContext.ready); }})
        .then(() => true)""", await_promise=True)
    page.wait_for("__lab.sessionContext.session?.kernel?.connectionStatus === 'connected' && "
                  "__lab.sessionContext.session.kernel.status === 'idle'", START_TIMEOUT,
                  f"{path}'s kernel")


def validate(page: browser.Browser, timeout: float) -> dict:
    """Click nbgrader's Validate (it saves the notebook, then asks the server to run and check
    it); the dialog's message: its classes (``validation-success``, ``validation-failed``, ...)
    and text."""
    button = ".jp-NotebookPanel:not(.lm-mod-hidden) .validate-button"
    page.wait_for(f"document.querySelector({json.dumps(button)})?.offsetWidth > 0", 30,
                  "the Validate button")
    page.click(button)
    return page.wait_for("""(() => { const m = document.querySelector('#validation-message');
        return m && {kinds: [...m.classList], text: m.innerText}; })()""", timeout,
                         "nbgrader's validation")


def task_names(source: str) -> list[str]:
    return [name for _, name in re.findall(r"task\(\s*([\"'])(.*?)\1", source)]


# The code cells of the open notebook's model, as the test reads them.
READ_CELLS = """__lab.content.model.toJSON().cells.filter(c => c.cell_type === 'code').map(c => ({
    id: c.id, source: c.source, graded: !!(c.metadata.nbgrader || {}).grade,
    count: c.execution_count,
    errors: c.outputs.filter(o => o.output_type === 'error').map(o => o.ename + ': ' + o.evalue),
    text: c.outputs.filter(o => o.output_type === 'stream').map(o => o.text).join('')}))"""


@pytest.mark.timeout(900)  # a hang guard: every wait below is bounded on its own
@pytest.mark.parametrize("lab", LABS)
def test_lab_runs_and_validates_in_jupyterlab(lab, lab_page):
    page, limits = lab_page, limits_for(lab)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    logged = len(page.errors)
    open_notebook(page, f"{lab}/{released_notebook(lab).name}")               # 1.

    # 2. run all cells; the command's promise settles when the last one is done
    page.evaluate("""window.__run = null; jupyterapp.commands.execute('notebook:run-all-cells',
        {widgetId: __lab.id}).then(ok => { window.__run = {ok}; },
                                   e => { window.__run = {error: String(e)}; }); true""")
    run = page.wait_for("window.__run", limits.notebook_timeout_s, f"{lab}'s cells to run")
    cells = page.evaluate(READ_CELLS)
    assert "error" not in run, run["error"]
    errors = [f"cell {c['id']}: {e}" for c in cells for e in c["errors"]]
    assert errors == [], f"{lab}: cells show errors: {errors}"
    assert [c["id"] for c in cells if c["count"] is None] == [], f"{lab}: cells did not run"
    assert run["ok"] is True
    graded = [c for c in cells if c["graded"]]
    assert graded, f"{lab} has no graded cell"
    for cell in graded:
        for name in task_names(cell["source"]):
            assert f"{name}: {PASSED}" in cell["text"], f"{lab} {cell['id']}: {cell['text']!r}"

    # the last graded check on screen, its pass line rendered
    last = json.dumps(graded[-1]["id"])
    page.evaluate(f"""(() => {{ const notebook = __lab.content;
        const at = notebook.widgets.findIndex(w => w.model.id === {last});
        notebook.activeCellIndex = at; return notebook.scrollToItem(at, 'center'); }})()
        .then(() => true)""", await_promise=True)
    page.wait_for(f"""(() => {{ const cell = __lab.content.widgets.find(w => w.model.id === {last});
        return cell.isAttached && cell.node.textContent.includes({json.dumps(PASSED)}); }})()""",
                  30, f"{lab}'s last check to show its pass line")
    (SCREENSHOTS / f"{lab}.png").write_bytes(page.screenshot())

    result = validate(page, limits.notebook_timeout_s)                          # 3.
    (SCREENSHOTS / f"{lab}_validate.png").write_bytes(page.screenshot())
    assert "validation-success" in result["kinds"], f"{lab}: {result['text']}"
    assert "Success! Your notebook passes all the tests." in result["text"]
    assert page.errors[logged:] == [], f"{lab}: JupyterLab logged console errors"


@pytest.mark.timeout(900)
def test_validate_names_each_unfinished_check(lab_page):
    """Validate on the untouched release of the quickest lab: every graded cell failed, each
    with its task's sentence."""
    page, lab = lab_page, UNFINISHED
    open_notebook(page, f"unfinished/{released_notebook(lab).name}")
    result = validate(page, limits_for(lab).notebook_timeout_s)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    (SCREENSHOTS / "unfinished_validate.png").write_bytes(page.screenshot())
    assert "validation-failed" in result["kinds"], result["text"]
    released = json.loads(released_notebook(lab).read_text())["cells"]
    graded = [c for c in released if c["metadata"].get("nbgrader", {}).get("grade")]
    assert result["text"].count("The following cell failed:") == len(graded)
    for cell in graded:
        for name in task_names("".join(cell["source"])):
            assert f"{name}: not done yet" in result["text"]
