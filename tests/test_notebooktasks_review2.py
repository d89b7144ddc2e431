"""The second review suite's judges, on a real IPython shell: each task's error cell raises the
error it is about, a right solution passes, and a turn that ran nothing (or printed the whole
data) fails."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import notebooktasks_review2 as suite  # noqa: E402
from tasksuite import Outcome  # noqa: E402

#: What a right turn runs, per task (after SETUP, and the failing cell for a fix).
SOLUTIONS = {
    "groc_share": "s = tx.groupby('category')['amount'].sum()\n"
    "print(round(100 * s['groceries'] / s.sum(), 1))",
    "top2_cat": "print(list(tx.groupby('category')['amount'].sum().nlargest(2).index))",
    "week_max": "tx['ts'] = pd.to_datetime(tx['ts'])\n"
    "print(tx.set_index('ts')['amount'].resample('W').sum().max())",
    "pivot": "tx['month'] = pd.to_datetime(tx['ts']).dt.month\n"
    "p = tx.pivot_table(index='category', columns='month', values='amount', aggfunc='sum')\n"
    "print(p.loc['dining', 7])",
    "merchant": "tx['merchant'] = tx['merchant'].str.strip().str.lower()\n"
    "print(tx.groupby('merchant')['amount'].sum().idxmax())",
    "money_str": "total_str = f\"${tx['amount'].sum():,.2f}\"",
    "dup_count": "print(leads.duplicated().sum())",
    "dedupe": "leads = leads.drop_duplicates()",
    "big_cities": "print(list(population[population > 150_000].index))",
    "worst_store": "d = pd.DataFrame(records).groupby('store')[['returned', 'sold']].sum()\n"
    "print((d['returned'] / d['sold']).idxmax())",
    "p90_wait": "print(er['wait_min'].quantile(0.9))",
    "grid_max": "print(np.unravel_index(grid.argmax(), grid.shape))",
    "grid_norm": "grid_norm = grid / grid.sum(axis=1, keepdims=True)",
    "top_word": "import re\nfrom collections import Counter\n"
    "print(Counter(re.findall(r'[a-z]+', speech.lower())).most_common(1)[0][0])",
    "m2_mean": "import re\nprint(np.mean([int(re.search(r'(\\d+)\\s*m2', s).group(1)) "
    "for s in listings]))",
    "cfg_lr": "import json\nprint(json.load(open('config.json'))['model']['params']['learning_rate'])",
    "cfg_edit": "import json\nc = json.load(open('config.json'))\n"
    "c['model']['params']['n_estimators'] = 600\njson.dump(c, open('config.json', 'w'), indent=2)",
    "tsv_site": "print(pd.read_csv('air.tsv', sep='\\t').groupby('site')['pm25'].mean().idxmax())",
    "fix_typo": "print(f'avg ticket: {avg_ticket:.2f}')",
    "fix_append": "ledger = pd.concat([ledger, pd.DataFrame([{'date': '2024-07-15', "
    "'item': 'printer ink', 'cost': 31.5}])], ignore_index=True)",
    "fix_strip": "codes_clean = [c.strip().upper() for c in codes]",
    "fix_int": "total_kg = sum(float(w) for w in weights_txt)",
    "fix_merge": "m = staff.merge(depts, left_on='dept_id', right_on='id')",
}

#: What a wrong turn prints (everything, or another question's answer), per task.
WRONG = {
    "groc_share": "print(tx.groupby('category')['amount'].sum())",
    "top2_cat": "print(tx['category'].value_counts().head(2))",
    "week_max": "print(tx['amount'].max())",
    "merchant": "print(tx.groupby('merchant')['amount'].sum().idxmax())",
    "dup_count": "print(leads)",
    "cfg_lr": "print(open('config.json').read())",
    "big_cities": "print(population)",
    "worst_store": "print(pd.DataFrame(records).groupby('store')['returned'].sum().idxmax())",
    "top_word": "from collections import Counter\n"
    "print(Counter(speech.lower().split()).most_common(1)[0][0])",
    "m2_mean": "import re\nprint(np.mean([int(re.findall(r'\\d+', s)[0]) for s in listings]))",
    "tsv_site": "print(pd.read_csv('air.tsv', sep='\\t').groupby('site')['no2'].mean().idxmax())",
}


@pytest.fixture
def shell(tmp_path):
    here = os.getcwd()
    os.chdir(tmp_path)
    ip = InteractiveShell.instance()
    ip.user_ns.clear()
    ip.init_user_ns()
    yield ip
    os.chdir(here)


def _turn(ip: InteractiveShell, task, code: str) -> Outcome:
    ip.run_cell(suite.SETUP, silent=True)
    if task.cell:
        with capture_output():
            failed = ip.run_cell(task.cell)
        assert failed.error_in_exec is not None, task.name  # the error %agent fix is about
    with capture_output() as out:
        ran = ip.run_cell(code)
    assert ran.success, (task.name, ran.error_in_exec)
    return Outcome("", (code,), (out.stdout,), ip.user_ns, task.prompt or task.cell)


def test_every_task_has_a_solution():
    assert set(SOLUTIONS) == {t.name for t in suite.TASKS}
    assert len(suite.TASKS) >= 16


@pytest.mark.parametrize("task", suite.TASKS, ids=lambda t: t.name)
def test_a_right_turn_passes_and_a_turn_that_did_nothing_fails(task, shell):
    assert task.passed(_turn(shell, task, SOLUTIONS[task.name])), task.name
    shell.user_ns.clear()
    shell.init_user_ns()
    for stale in ("config.json", "air.tsv"):
        Path(stale).unlink(missing_ok=True)
    nothing = _turn(shell, task, "pass")
    assert not task.passed(nothing), task.name


@pytest.mark.parametrize("name", sorted(WRONG))
def test_a_wrong_turn_fails(name, shell):
    (task,) = suite.by_name([name])
    assert not task.passed(_turn(shell, task, WRONG[name])), name


def test_fix_cells_raise_the_errors_they_are_about(shell):
    shell.run_cell(suite.SETUP, silent=True)
    want = {
        "fix_typo": NameError,
        "fix_append": AttributeError,
        "fix_strip": AttributeError,
        "fix_int": ValueError,
        "fix_merge": KeyError,
    }
    for task in suite.TASKS:
        if task.cell:
            with capture_output():
                result = shell.run_cell(task.cell)
            assert type(result.error_in_exec) is want[task.name], task.name
