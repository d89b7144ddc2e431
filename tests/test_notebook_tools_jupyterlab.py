"""The agent works on the open notebook in a real JupyterLab: reads it, proposes cell edits
that the user reviews as diffs in place (Accept, Reject with feedback), runs cells after an
approval, and the notebook's own undo takes an accepted edit back.

The JupyterLab server, the scripted model server and Debian's Chromium are those of
tests/test_jupyterlab.py (its fixtures, imported). Screenshots go to
``artifacts/jupyterlab/``; with ``JSA_UPDATE_SCREENSHOTS=1`` those shown in
``docs/screenshots.md`` are copied to ``docs/screenshots/``. The latency of a proposed edit
(the kernel's request to the diff in the page) is written to
``artifacts/jupyterlab/notebook-edit-latency.json``.
"""

from __future__ import annotations

import json
import time

import pytest
from test_jupyterlab import (  # noqa: F401  (fixtures)
    ARTIFACTS,
    KERNELSPEC,
    Notebook,
    _open,
    _our_errors,
    _shot,
    _tool_message,
    _transcript,
    _wait_for,
    browser,
    lab,
    scripted,
)

pytestmark = pytest.mark.slow

PRICES = "prices = [3, 1, 2]"
TOTAL = "total = sum(prices)\nprint('total', total)"
FEEDBACK = "keep the original prices"


def _notebook(lab, browser, name: str):  # noqa: F811  (the imported fixtures)
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = KERNELSPEC
    nb.cells = [
        nbformat.v4.new_markdown_cell("# Prices"),
        nbformat.v4.new_code_cell(PRICES),
        nbformat.v4.new_code_cell(""),
    ]
    nb.cells[0].id, nb.cells[1].id = "title", "prices"
    lab.api(f"/api/contents/{name}", {"type": "notebook", "format": "json", "content": nb}, "PUT")
    page = _open(browser, lab, name)
    _wait_for(
        lambda: any(
            s["path"] == name and s["kernel"]["execution_state"] == "idle"
            for s in lab.api("/api/sessions")
        ),
        90,
        "the notebook's kernel",
    )
    page.evaluate("window.jupyterapp.commands.execute('application:toggle-left-area')")
    notebook = Notebook(page)
    notebook.run("%load_ext jupyter_session_agent", timeout=90)
    return notebook


def _sources(page) -> list[str]:
    return page.evaluate(
        """() => {
          const nb = window.jupyterapp.shell.currentWidget.content.model;
          const out = [];
          for (let i = 0; i < nb.cells.length; i++) out.push(nb.cells.get(i).sharedModel.getSource());
          return out;
        }"""
    )


def _approve_run(cell, expected_source: str) -> None:
    panel = _transcript(cell).locator(".jsa-approval")
    try:
        panel.wait_for(timeout=30_000)
    except Exception:
        raise AssertionError(f"no approval question:\n{cell.inner_text()[-3000:]}") from None
    # the approval shows the cell as it is now in the notebook: what would run
    _wait_for(lambda: expected_source in panel.inner_text(), 10, "the cell's source")
    _shot(cell, "nb-run-approval", doc="notebook-run-approval")
    panel.locator("button", has_text="Allow once").click()


def test_review_accept_reject_with_feedback_run_and_undo(lab, browser, scripted):  # noqa: F811
    notebook = _notebook(lab, browser, "review.ipynb")
    page = notebook.page
    scripted.script(
        {"tool_calls": [{"name": "notebook", "arguments": {"action": "read"}}]},
        {
            "tool_calls": [
                {
                    "name": "notebook_edit",
                    "arguments": {
                        "edits": [
                            {"op": "insert", "cell": "prices", "source": TOTAL},
                            {"op": "replace", "cell": "prices", "source": "prices = []"},
                            {"op": "delete", "cell": "title"},
                        ]
                    },
                }
            ]
        },
        {"tool_calls": [{"name": "notebook_run", "arguments": {"cell": "prices"}}]},
        {"tool_calls": [{"name": "notebook_run", "arguments": {"cell": "2"}}]},
        {"text": "Added the total below the prices and ran both cells: the total is 6."},
    )
    notebook.run("%%agent\nAdd a cell with the total of the prices and run it.", wait=False)
    # the agent's cell moves down when an edit is accepted above it: found by its text
    cell = notebook.cells.filter(has_text="Add a cell with the total")
    reviews = page.locator(".jp-Notebook .jsa-review")
    reviews.nth(2).wait_for(timeout=60_000)
    # ms from the kernel's request: the diffs visible, and (the baseline, same request) the
    # request reaching the page; the same clock (one machine)
    latency = int(reviews.nth(0).get_attribute("data-latency-ms"))
    arrived = int(reviews.nth(0).get_attribute("data-arrived-ms"))
    assert 0 <= arrived <= latency < 10_000
    # each change in place: the insert after the prices cell, the others inside their cells
    cells = notebook.cells
    assert cells.nth(1).locator(".jsa-review[data-op='replace']").count() == 1
    assert cells.nth(0).locator(".jsa-review[data-op='delete']").count() == 1
    insert = reviews.and_(page.locator("[data-op='insert']"))
    assert "+ total = sum(prices)" in insert.locator(".jsa-review-diff").inner_text()
    replace = cells.nth(1).locator(".jsa-review[data-op='replace']")
    assert replace.locator(".jsa-diff-del").inner_text().strip() == f"- {PRICES}"
    assert replace.locator(".jsa-diff-add").inner_text().strip() == "+ prices = []"
    assert insert.locator("button:visible").all_inner_texts() == [
        "Accept",
        "Reject",
        "Reject with feedback",
        "Accept all",
    ]
    # the model read the live notebook first (ids, types, sources)
    read = _tool_message(scripted.turn_requests()[1])
    assert "id prices" in read and PRICES in read and "(the saved" not in read
    assert _transcript(cell).locator(".jsa-frontend").count() == 1
    assert not cell.locator(".jp-Stdin").is_visible()  # the extension answers the question
    _shot(page, "nb-review", doc="notebook-review")
    # nothing is applied before an answer
    assert _sources(page)[:2] == ["# Prices", PRICES]

    insert.locator("button", has_text="Accept").first.click()
    replace.locator("button", has_text="Reject with feedback").click()
    replace.locator("textarea").fill(FEEDBACK)
    replace.locator("button", has_text="Send feedback and reject").click()
    cells.nth(0).locator(".jsa-review button", has_text="Reject").first.click()

    # the rejected edit's cell runs with its own source; the inserted one runs after it
    _approve_run(cell, PRICES)
    _approve_run(cell, "total = sum(prices)")
    notebook.wait(cell, 60)
    requests = scripted.turn_requests()
    review = _tool_message(requests[2])
    assert "1 of 3 edits accepted, reviewed by the user" in review
    assert f"rejected — the user says: {FEEDBACK}" in review
    assert "edit 2 (delete cell title): rejected" in review
    assert "ran cell 1 (id prices)" in _tool_message(requests[3])
    assert "total 6" in _tool_message(requests[4])
    sources = _sources(page)
    assert sources[:3] == ["# Prices", PRICES, TOTAL]  # the accepted insert, in the model
    view = _transcript(cell)
    assert "run cell 2" in view.inner_text()  # the transcript names the cell that ran
    assert "insert after cell prices, replace cell prices, delete cell title" in view.inner_text()
    _wait_for(lambda: reviews.count() == 0, 10, "the review boxes to go")
    _shot(cell, "nb-after-review", doc="notebook-after-review")

    # the notebook's own undo takes the accepted insert back
    page.keyboard.press("Escape")
    page.evaluate("window.jupyterapp.commands.execute('notebook:undo-cell-action')")
    _wait_for(lambda: TOTAL not in _sources(page), 10, "the undo")
    assert _sources(page)[:2] == ["# Prices", PRICES]
    (ARTIFACTS / "notebook-edit-latency.json").write_text(
        json.dumps({"diff_visible_ms": latency, "request_in_page_ms": arrived})
    )
    assert not _our_errors(page), page.errors
    page.close()


def test_a_notebook_closed_mid_review_rejects_what_is_left(lab, browser, scripted):  # noqa: F811
    notebook = _notebook(lab, browser, "closing.ipynb")
    page = notebook.page
    scripted.script(
        {
            "tool_calls": [
                {
                    "name": "notebook_edit",
                    "arguments": {"edits": [{"op": "insert", "source": "print('never')"}]},
                }
            ]
        },
        {"text": "The notebook was closed before the review."},
    )
    logs = []
    page.on("console", lambda m: logs.append(m.text))
    notebook.run("%%agent\nAppend a print cell.", wait=False)
    page.locator(".jp-Notebook .jsa-review").wait_for(timeout=60_000)
    before = time.monotonic()
    page.evaluate("window.jupyterapp.shell.currentWidget.dispose()")  # closed, no save dialog
    try:
        _wait_for(lambda: len(scripted.turn_requests()) >= 2, 30, "the turn to go on")
    except AssertionError:
        raise AssertionError(str([m for m in logs if "jsa" in m])) from None
    answer = _tool_message(scripted.turn_requests()[1])
    assert "0 of 1 edits accepted" in answer
    assert "the notebook was closed during the review" in answer
    assert time.monotonic() - before < 30
    saved = lab.api("/api/contents/closing.ipynb")["content"]
    assert all("never" not in "".join(c["source"]) for c in saved["cells"])
    page.close()


def test_a_rule_applies_edits_without_the_wait_and_a_second_agent_cell_reads_them(
    lab,  # noqa: F811
    browser,  # noqa: F811
    scripted,  # noqa: F811
):
    notebook = _notebook(lab, browser, "allowed.ipynb")
    page = notebook.page
    scripted.script(
        {
            "tool_calls": [
                {
                    "name": "notebook_edit",
                    "arguments": {
                        "edits": [{"op": "insert", "cell": "prices", "source": "count = 3"}]
                    },
                }
            ]
        },
        {"text": "Inserted."},
        {"tool_calls": [{"name": "notebook", "arguments": {"action": "read", "cell": "2"}}]},
        {"text": "Cell 2 counts the prices."},
    )
    notebook.run("%config AgentMagics.titles = False")  # no title call to take a reply
    # two agent cells queued: the second waits for the first, each answers its own questions
    notebook.run("%%agent -p edit=allow\nCount the prices in a new cell.", wait=False)
    notebook.run("%%agent\nWhat does cell 2 do?", wait=False)
    box = page.locator(".jp-Notebook .jsa-review")
    box.wait_for(timeout=60_000)
    # applied at once, still shown, no buttons to wait on
    _wait_for(lambda: "Applied (a rule allows notebook edits)" in box.inner_text(), 10, "applied")
    assert box.locator("button:visible").count() == 0
    _shot(box, "nb-applied-by-rule")
    second = notebook.cells.filter(has_text="What does cell 2 do?")
    notebook.wait(second, 90)
    requests = scripted.turn_requests()
    assert "1 of 1 edits accepted, applied (a rule allows edits)" in _tool_message(requests[1])
    read = _tool_message(requests[3])
    assert "cell 2 of" in read and "count = 3" in read
    assert _sources(page)[2] == "count = 3"
    assert not _our_errors(page), page.errors
    page.close()


def test_a_request_in_a_saved_output_never_edits_the_notebook_it_is_opened_in(
    lab,  # noqa: F811
    browser,  # noqa: F811
):
    """A notebook saved while a review was open (or one from elsewhere that carries such an
    output) holds a live view with a ``frontend`` request: opened again, nothing asks about
    it, so it is never done — not applied (even with ``allowed``), no review boxes, no answer
    typed anywhere. Before, the renderer did any request it saw: opening the file rewrote
    the user's cells when the notebook was trusted (its outputs render again in the page)."""
    import nbformat

    from jupyter_session_agent.tools.frontend import PROTOCOL
    from jupyter_session_agent.ui.display import MIME_TYPE, TranscriptView

    view = TranscriptView([], live=True, progress={"elapsed": 1, "waiting": "review"})
    view.frontend = {
        "protocol": PROTOCOL,
        "nonce": "0123456789abcdef01234567",
        "sent": 1_760_000_000_000,
        "action": "edit",
        "allowed": True,
        "edits": [
            {"op": "replace", "cell": "prices", "cell_type": "code", "source": "pwned = True"},
            {"op": "insert", "cell": None, "cell_type": "code", "source": "import os"},
        ],
    }
    review = dict(view.frontend, nonce="89abcdef0123456789abcdef", allowed=False)
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = KERNELSPEC
    nb.cells = [nbformat.v4.new_markdown_cell("# Prices"), nbformat.v4.new_code_cell(PRICES)]
    nb.cells[0].id, nb.cells[1].id = "title", "prices"
    for request in (view.frontend, review):
        agent = nbformat.v4.new_code_cell("%%agent\nChange the prices.")
        data = view._repr_mimebundle_()
        data[MIME_TYPE] = dict(data[MIME_TYPE], frontend=request)
        agent.outputs = [nbformat.v4.new_output("display_data", data=data)]
        nb.cells.append(agent)
    lab.api(
        "/api/contents/saved-review.ipynb",
        {"type": "notebook", "format": "json", "content": nb},
        "PUT",
    )
    page = _open(browser, lab, "saved-review.ipynb")
    page.locator(".jp-Notebook .jsa-transcript").first.wait_for(timeout=60_000)
    # the user trusts the notebook (what the Trust command does after its dialog): every
    # output renders again, now in the page
    page.evaluate(
        """() => {
          const model = window.jupyterapp.shell.currentWidget.content.model;
          for (let i = 0; i < model.cells.length; i++) model.cells.get(i).trusted = true;
        }"""
    )
    page.wait_for_timeout(3000)
    assert page.locator(".jp-Notebook .jsa-transcript").count() == 2
    assert _sources(page)[:2] == ["# Prices", PRICES]
    assert len(_sources(page)) == len(nb.cells)
    assert page.locator(".jp-Notebook .jsa-review").count() == 0
    assert page.locator(".jp-Notebook .jsa-frontend").count() == 0
    assert not _our_errors(page), page.errors
    page.close()


def test_accept_all_then_undo_takes_back_a_replaced_source_and_a_deleted_cell(
    lab,  # noqa: F811
    browser,  # noqa: F811
    scripted,  # noqa: F811
):
    """Accept all applies a replace and a delete; the notebook's own undo (the cell's editor
    for a source, the notebook's cell undo for a deleted cell) takes each back. The review in
    the dark theme is legible (its diff and buttons)."""
    from test_jupyterlab import _assert_contrast, _theme

    notebook = _notebook(lab, browser, "undo.ipynb")
    page = notebook.page
    _theme(page, "JupyterLab Dark")
    scripted.script(
        {
            "tool_calls": [
                {
                    "name": "notebook_edit",
                    "arguments": {
                        "edits": [
                            {"op": "replace", "cell": "prices", "source": "prices = [10, 20]"},
                            {"op": "delete", "cell": "title"},
                        ]
                    },
                }
            ]
        },
        {"text": "Replaced the prices and removed the title."},
    )
    notebook.run("%config AgentMagics.titles = False")
    notebook.run("%%agent\nUse the new prices; drop the title.", wait=False)
    reviews = page.locator(".jp-Notebook .jsa-review")
    reviews.nth(1).wait_for(timeout=60_000)
    _assert_contrast(
        page.locator(".jp-Notebook"),
        [".jsa-review .jsa-diff-add", ".jsa-review .jsa-diff-del", ".jsa-review-head"],
    )
    _shot(page, "nb-review-dark", doc="notebook-review-dark")
    reviews.first.locator("button", has_text="Accept all").click()
    cell = notebook.cells.filter(has_text="Use the new prices")
    notebook.wait(cell, 60)
    assert "2 of 2 edits accepted" in _tool_message(scripted.turn_requests()[1])
    assert _sources(page)[0] == "prices = [10, 20]"
    _wait_for(lambda: reviews.count() == 0, 10, "the review boxes to go")

    # the deleted cell comes back with the notebook's cell undo
    page.keyboard.press("Escape")
    page.evaluate("window.jupyterapp.commands.execute('notebook:undo-cell-action')")
    _wait_for(lambda: _sources(page)[0] == "# Prices", 10, f"the delete undone: {_sources(page)}")
    # the replaced source comes back with the undo in its own editor
    replaced = notebook.cells.nth(1)
    replaced.locator(".cm-content").click()
    page.keyboard.press("Control+z")
    _wait_for(lambda: _sources(page)[1] == PRICES, 10, f"the replace undone: {_sources(page)}")
    assert not _our_errors(page), page.errors
    page.close()


def test_a_cell_the_user_edits_during_the_review_is_not_overwritten_by_accept(
    lab,  # noqa: F811
    browser,  # noqa: F811
    scripted,  # noqa: F811
):
    """The diff shows the cell as it was when proposed. The user types into that cell while
    the review is open, then clicks Accept: the diff no longer says what Accept would do, so
    the edit is refused with that reason (the model reads it) and the user's typing stays.
    Before, Accept replaced the cell with the proposal and the typing was gone."""
    notebook = _notebook(lab, browser, "typing.ipynb")
    page = notebook.page
    scripted.script(
        {
            "tool_calls": [
                {
                    "name": "notebook_edit",
                    "arguments": {
                        "edits": [{"op": "replace", "cell": "prices", "source": "prices = []"}]
                    },
                }
            ]
        },
        {"text": "The cell changed; I will read it again."},
    )
    notebook.run("%config AgentMagics.titles = False")
    notebook.run("%%agent\nEmpty the prices.", wait=False)
    box = page.locator(".jp-Notebook .jsa-review")
    box.wait_for(timeout=60_000)
    editor = notebook.cells.nth(1).locator(".cm-content")
    editor.click()
    page.keyboard.press("End")
    page.keyboard.type("  # mine")
    _wait_for(lambda: _sources(page)[1] == PRICES + "  # mine", 10, "the typing")
    box.locator("button", has_text="Accept").first.click()
    cell = notebook.cells.filter(has_text="Empty the prices.")
    notebook.wait(cell, 60)
    answer = _tool_message(scripted.turn_requests()[1])
    assert "0 of 1 edits accepted" in answer, answer
    assert "the cell was edited during the review" in answer
    assert _sources(page)[1] == PRICES + "  # mine"
    assert not _our_errors(page), page.errors
    page.close()


def test_a_kernel_restarted_mid_review_ends_the_review_without_editing(
    lab,  # noqa: F811
    browser,  # noqa: F811
    scripted,  # noqa: F811
):
    """The kernel that asked is restarted while the diffs are open: nobody waits for the
    answer any more, so the review ends (its edits rejected, its buttons gone) and a click
    never edits the notebook. Before, the diffs stayed with live buttons and Accept applied
    the edit for an agent that no longer existed."""
    notebook = _notebook(lab, browser, "restart.ipynb")
    page = notebook.page
    scripted.script(
        {
            "tool_calls": [
                {
                    "name": "notebook_edit",
                    "arguments": {"edits": [{"op": "insert", "source": "print('orphan')"}]},
                }
            ]
        },
        {"text": "never read"},
    )
    notebook.run("%config AgentMagics.titles = False")
    notebook.run("%%agent\nAppend a print cell.", wait=False)
    box = page.locator(".jp-Notebook .jsa-review")
    box.wait_for(timeout=60_000)
    before = _sources(page)
    page.evaluate("window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.restart()")
    page.wait_for_timeout(3000)
    accept = page.locator(".jp-Notebook .jsa-review button:not([disabled])", has_text="Accept")
    if accept.count():
        accept.first.click()
        page.wait_for_timeout(1000)
    assert _sources(page) == before
    assert all("orphan" not in s for s in _sources(page))
    assert not _our_errors(page), page.errors
    page.close()


def test_a_second_view_of_the_notebook_answers_when_the_first_is_closed(
    lab,  # noqa: F811
    browser,  # noqa: F811
    scripted,  # noqa: F811
):
    """ "New View for Notebook", then the first view closed: the kernel connection (and its
    questions) belong to the notebook, not to the view that was open first, so the agent's
    request rendered in the remaining view is answered."""
    notebook = _notebook(lab, browser, "views.ipynb")
    page = notebook.page
    notebook.run("%config AgentMagics.titles = False")
    scripted.script(
        {"tool_calls": [{"name": "notebook", "arguments": {"action": "read"}}]},
        {"text": "Read it."},
    )
    page.evaluate(
        """async () => {
          const app = window.jupyterapp;
          const first = app.shell.currentWidget;
          await app.commands.execute('docmanager:clone');
          first.dispose();
          const view = app.shell.currentWidget;
          const model = view.content.model;
          model.sharedModel.insertCell(model.cells.length, {
            cell_type: 'code', source: '%%agent\\nRead the notebook.'
          });
          view.content.activeCellIndex = model.cells.length - 1;
          void app.commands.execute('notebook:run-cell');  // resolves when the cell ends
        }"""
    )
    _wait_for(lambda: len(scripted.turn_requests()) >= 2, 40, "the read to be answered")
    read = _tool_message(scripted.turn_requests()[1])
    assert "id prices" in read and "(the saved" not in read, read
    page.close()
