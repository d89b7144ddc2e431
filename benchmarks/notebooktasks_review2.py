"""A second unseen suite for issue 26's review: notebook work neither earlier suite holds.

Written by a reviewer who did not write issue 26's changes, before the model ran on it, after
``notebooktasks.py`` (tuned on) and ``notebooktasks_review.py`` (read by the authors) stopped
being unseen. Other data and other shapes: a ``tx`` DataFrame of card transactions whose
timestamps are text and whose merchant names are typed inconsistently (category shares, top
two by sum, totals per week, a pivot table by month, a total formatted as money), a ``leads``
export with duplicated rows, a Series of city populations on a string index, a 2-d numpy
``grid``, a list of dicts (``records``), an ``er`` DataFrame of waiting times (a percentile), a
``speech`` text (the most common word), a list of ``listings`` to pull a number out of with a
regex; on disk a nested JSON ``config.json`` to read and to edit, and a tab-separated
``air.tsv`` with missing values. Five tasks are real errors sent with ``%agent fix``: a typo'd
variable (NameError), ``DataFrame.append`` removed from pandas (AttributeError), a string
method called on a list (AttributeError), ``int('3.5')`` (ValueError), a merge on a key one
side does not have (KeyError).

Judged like the other suites (``tasksuite.shows_number`` / ``kernel``; a name through
``notebooktasks_review.names_only``: the answer or the last successful output names the right
candidates and no other). Expected values are computed here from the same data, never typed.

Run: ``python benchmarks/bench_local_tasks.py --suite review2 -v``.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import re
import statistics
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from notebooktasks import NotebookTask
from notebooktasks_review import either, names_only, ratio
from tasksuite import Outcome, kernel, numbers, shows_number

# -- the data (also written into SETUP, so the checkers and the kernel agree) ---------------

TX = [  # (timestamp as text, category, merchant as typed, amount)
    ("2024-06-03 09:14", "groceries", "FreshMart", 54.20),
    ("2024-06-04 12:30", "dining", "La Piazza", 38.50),
    ("2024-06-05 08:05", "transport", "metro", 2.90),
    ("2024-06-07 18:22", "groceries", "freshmart ", 61.75),
    ("2024-06-09 20:10", "dining", "la piazza", 44.00),
    ("2024-06-11 10:00", "utilities", "CityPower", 87.30),
    ("2024-06-12 08:07", "transport", "Metro", 2.90),
    ("2024-06-14 17:45", "shopping", "ElectroHub", 239.99),
    ("2024-06-16 11:20", "groceries", " FRESHMART", 48.60),
    ("2024-06-18 13:05", "dining", "Sushi Go", 52.40),
    ("2024-06-20 09:30", "groceries", "GreenGrocer", 23.15),
    ("2024-06-23 19:55", "dining", "La Piazza ", 41.20),
    ("2024-06-25 08:03", "transport", "METRO", 2.90),
    ("2024-06-28 16:40", "shopping", "BookNook", 34.99),
    ("2024-07-01 09:10", "groceries", "FreshMart", 72.35),
    ("2024-07-02 12:45", "utilities", "citypower", 91.10),
    ("2024-07-04 20:30", "dining", "sushi go", 58.80),
    ("2024-07-06 10:15", "groceries", "freshmart", 66.40),
    ("2024-07-08 08:01", "transport", "Metro", 29.00),
    ("2024-07-10 18:50", "shopping", "electrohub ", 19.99),
    ("2024-07-12 13:35", "dining", "La Piazza", 36.90),
    ("2024-07-13 11:11", "groceries", "GreenGrocer", 27.80),
    ("2024-07-14 17:25", "groceries", " FreshMart ", 58.05),
]
LEADS = [  # a CRM export where some rows came twice
    ("Maya Chen", "maya.chen@northwind.com", "webinar"),
    ("Omar Haddad", "omar@haddad.dev", "referral"),
    ("Lena Vogel", "l.vogel@contoso.de", "ads"),
    ("Maya Chen", "maya.chen@northwind.com", "webinar"),
    ("Ravi Kumar", "ravi.k@fabrikam.in", "ads"),
    ("Ines Duarte", "ines@duarte.pt", "webinar"),
    ("Omar Haddad", "omar@haddad.dev", "referral"),
    ("Tom Baker", "tbaker@tailspin.co.uk", "organic"),
    ("Maya Chen", "maya.chen@northwind.com", "webinar"),
    ("Kofi Mensah", "kofi@mensah.gh", "organic"),
    ("Lena Vogel", "l.vogel@contoso.de", "ads"),
    ("Yuki Sato", "yuki.sato@adatum.jp", "referral"),
]
POPULATION = {
    "Lisbon": 545923,
    "Porto": 231800,
    "Braga": 193333,
    "Coimbra": 140796,
    "Aveiro": 80954,
    "Faro": 64560,
    "Evora": 53591,
}
RECORDS = [
    {"store": "Alfama", "sku": "TS-01", "sold": 120, "returned": 6},
    {"store": "Baixa", "sku": "TS-01", "sold": 210, "returned": 12},
    {"store": "Chiado", "sku": "TS-01", "sold": 140, "returned": 4},
    {"store": "Alfama", "sku": "JK-07", "sold": 40, "returned": 5},
    {"store": "Baixa", "sku": "JK-07", "sold": 130, "returned": 6},
    {"store": "Chiado", "sku": "JK-07", "sold": 61, "returned": 7},
    {"store": "Alfama", "sku": "SN-12", "sold": 77, "returned": 10},
    {"store": "Baixa", "sku": "SN-12", "sold": 150, "returned": 8},
    {"store": "Chiado", "sku": "SN-12", "sold": 90, "returned": 5},
]
TRIAGE = [3, 2, 4, 3, 5, 1, 3, 4, 2, 3, 4, 5, 3, 2, 4, 3, 5, 4, 3, 2, 4, 3, 1, 4, 5, 3, 4, 2]
WAITS = [42, 18, 75, 51, 120, 5, 38, 96, 22, 47, 83, 134, 55, 15, 71, 60, 152, 88, 35, 27]
WAITS += [66, 49, 3, 104, 141, 58, 79, 20]
SPEECH = (
    "Data first. Our team ships data products, and every product starts with data: raw "
    "Data from the app, the logs, the forms. We clean data, we check it, and we document it. "
    "Without clean data, the model is guesswork; with it, the model is simple. Ask for data, "
    "not opinions. The rest is easy."
)
LISTINGS = [
    "2 bed flat, 65 m2, 3rd floor",
    "studio 28m2 ground floor, 1 bathroom",
    "3 bed house - 104 m2 - garden 40m",
    "1 bed, 47 m2, balcony, 2nd floor",
    "4 bed house, 131 m2, 2 parking spaces",
    "2 bed flat 71 m2 near station",
]
CONFIG = {
    "project": "churn-v3",
    "seed": 7,
    "data": {
        "train_path": "data/train.csv",
        "test_size": 0.2,
        "features": ["tenure", "plan", "monthly_fee", "support_calls", "region"],
    },
    "model": {
        "type": "gradient_boosting",
        "params": {"n_estimators": 400, "max_depth": 5, "learning_rate": 0.03, "subsample": 0.8},
    },
}
AIR = [  # (site, date, pm25 or None, no2)
    ("harbour", "2024-05-01", 18.2, 41),
    ("park", "2024-05-01", 7.9, 12),
    ("centre", "2024-05-01", 21.5, 55),
    ("harbour", "2024-05-02", 24.8, 47),
    ("park", "2024-05-02", None, 15),
    ("centre", "2024-05-02", 19.1, 52),
    ("harbour", "2024-05-03", 27.3, 44),
    ("park", "2024-05-03", 9.4, 11),
    ("centre", "2024-05-03", None, 58),
    ("harbour", "2024-05-04", 16.0, 39),
    ("park", "2024-05-04", 8.8, 14),
    ("centre", "2024-05-04", 22.9, 61),
]
LEDGER = [
    ("2024-07-01", "paper", 12.4),
    ("2024-07-03", "stapler", 8.9),
    ("2024-07-09", "toner", 64.0),
]
NEW_ROW = {"date": "2024-07-15", "item": "printer ink", "cost": 31.5}
CODES = [" ab12", "cd34 ", " EF56 ", "gh78"]
WEIGHTS_TXT = ["2", "3.5", "1.25", "4", "0.75"]
STAFF = [("ana", 10, 52000), ("ben", 20, 61000), ("caro", 10, 58000), ("dev", 30, 47000)]
STAFF += [("eli", 20, 66000)]
DEPTS = [(10, "finance"), (20, "engineering"), (30, "support")]

_AIR_TSV = "site\tdate\tpm25\tno2\n" + "".join(
    f"{s}\t{d}\t{'NA' if p is None else p}\t{n}\n" for s, d, p, n in AIR
)

SETUP = f"""\
import pandas as pd
import numpy as np
tx = pd.DataFrame({[dict(zip(("ts", "category", "merchant", "amount"), t)) for t in TX]!r})
leads = pd.DataFrame({LEADS!r}, columns=["name", "email", "source"])
population = pd.Series({POPULATION!r}, name="population")
grid = (np.arange(48).reshape(6, 8) * 29) % 47
records = {RECORDS!r}
er = pd.DataFrame({{"triage": {TRIAGE!r}, "wait_min": {WAITS!r}}})
speech = {SPEECH!r}
listings = {LISTINGS!r}
ledger = pd.DataFrame({LEDGER!r}, columns=["date", "item", "cost"])
codes = {CODES!r}
weights_txt = {WEIGHTS_TXT!r}
staff = pd.DataFrame({STAFF!r}, columns=["emp", "dept_id", "salary"])
depts = pd.DataFrame({DEPTS!r}, columns=["id", "dept_name"])
with open("config.json", "w") as fh:
    fh.write({json.dumps(CONFIG, indent=2)!r})
with open("air.tsv", "w") as fh:
    fh.write({_AIR_TSV!r})
del fh
"""
#: An ablation, not the suite: ``REVIEW2_NEWEST=tx,leads`` defines these variables again at
#: the end of SETUP, so that they are among the newest the kernel's view describes (it
#: describes the newest eight data variables, and names the older ones only).
SETUP += "".join(
    f"_v = {n}\ndel {n}\n{n} = _v\ndel _v\n"
    for n in os.environ.get("REVIEW2_NEWEST", "").split(",")
    if n.isidentifier()
)

# -- what the answers are, from the data ----------------------------------------------------


def _sum_by(pairs: Any) -> dict[Any, float]:
    out: dict[Any, float] = {}
    for key, value in pairs:
        out[key] = out.get(key, 0.0) + value
    return out


_WHEN = [dt.datetime.strptime(t, "%Y-%m-%d %H:%M") for t, *_ in TX]
_TOTAL = sum(t[3] for t in TX)
_CATEGORY = _sum_by((c, a) for _, c, _, a in TX)
_TOP2 = sorted(_CATEGORY, key=_CATEGORY.__getitem__, reverse=True)[:2]
_WEEK = _sum_by((w.isocalendar()[:2], t[3]) for w, t in zip(_WHEN, TX))  # Monday to Sunday
_MONTH = _sum_by(((w.month, t[1]), t[3]) for w, t in zip(_WHEN, TX))
_MERCHANT = _sum_by((" ".join(m.split()).lower(), a) for *_, m, a in TX)
_RAW_MERCHANT = _sum_by((m, a) for *_, m, a in TX)
# cleaning the names changes the answer, and every answer is unique
assert (
    max(_MERCHANT, key=_MERCHANT.get).lower() != max(_RAW_MERCHANT, key=_RAW_MERCHANT.get).lower()
)
assert sorted(_WEEK.values())[-1] - sorted(_WEEK.values())[-2] > 1
assert sorted(_CATEGORY.values())[-2] - sorted(_CATEGORY.values())[-3] > 1

_GRID = [[(r * 8 + c) * 29 % 47 for c in range(8)] for r in range(6)]
_PEAK = max((v, r, c) for r, row in enumerate(_GRID) for c, v in enumerate(row))
assert sum(v == _PEAK[0] for row in _GRID for v in row) == 1

_STORE_RATE = {
    s: sum(r["returned"] for r in RECORDS if r["store"] == s)
    / sum(r["sold"] for r in RECORDS if r["store"] == s)
    for s in {r["store"] for r in RECORDS}
}
_RETURNED = _sum_by((r["store"], r["returned"]) for r in RECORDS)
assert max(_STORE_RATE, key=_STORE_RATE.get) != max(_RETURNED, key=_RETURNED.get)


def _words(text: str) -> Counter:
    return Counter(re.findall(r"[a-z']+", text.lower()))


_SPEECH_TOP = _words(SPEECH).most_common()
assert _SPEECH_TOP[0][1] > _SPEECH_TOP[1][1]  # no tie
assert Counter(SPEECH.lower().split()).most_common(1)[0][0] != _SPEECH_TOP[0][0]  # punctuation
#: The words an answer is judged on: those said twice or more, but not the little words any
#: sentence of an answer holds ("the most common word is ..."); answering "the" names none.
_SPEECH_NAMES = [w for w, n in _SPEECH_TOP if n >= 2 and w not in {"the", "we", "it", "is"}]
_SPEECH_NAMES = [w for w in _SPEECH_NAMES if w not in {"and", "with", "for", "from", "not"}]

_M2 = [float(re.search(r"(\d+)\s*m2", s).group(1)) for s in LISTINGS]  # type: ignore[union-attr]

_PM25 = {
    site: statistics.mean(p for s, _, p, _ in AIR if s == site and p is not None)
    for site in {a[0] for a in AIR}
}


def _p90(xs: list[int]) -> float:  # numpy's and pandas' default (linear) percentile
    return statistics.quantiles(xs, n=10, method="inclusive")[-1]


# -- the judges this suite adds -------------------------------------------------------------


def _position(row: int, col: int) -> Callable[[Outcome], bool]:
    """A successful output, or the answer, gives the position as ``(row, col)`` (numpy's
    ``np.int64(3)`` wrappers allowed) or as ``row 3 … column 5``."""
    pair = re.compile(
        rf"\(\s*{row}\s*,\s*{col}\s*\)|\brow\D{{0,6}}{row}\b.{{0,30}}\bcol\w*\D{{0,6}}{col}\b",
        re.I | re.S,
    )

    def check(o: Outcome) -> bool:
        def unwrap(text: str) -> str:
            return re.sub(r"np\.\w+\((\d+)\)", r"\1", text)

        return bool(pair.search(unwrap(o.results)) or pair.search(unwrap(o.answer)))

    return check


def final_number(expected: float, tol: float = 1e-6) -> Callable[[Outcome], bool]:
    """The answer's last number (when the question does not hold it), or the last number of
    the last successful output, is ``expected``: a small count is in any printed table (its
    index), so printing the data is not an answer."""

    def check(o: Outcome) -> bool:
        from jupyter_session_agent.core.codeaction import is_error

        def last(text: str) -> bool:
            found = numbers(text)[-1:]
            return bool(found) and math.isclose(found[0], expected, rel_tol=tol, abs_tol=tol)

        ok = [out for out in o.outputs if not is_error(out)]
        told = last(o.answer) and expected not in numbers(o.prompt)
        return told or bool(ok and last(ok[-1]))

    return check


def _no_dupes(v: Any) -> bool:
    rows = [tuple(r) for r in v.itertuples(index=False)]
    return rows == list(dict.fromkeys(LEADS))


def _grid_norm(v: Any) -> bool:
    return getattr(v, "shape", None) == (6, 8) and all(
        abs(float(v[r][c]) - _GRID[r][c] / sum(_GRID[r])) < 1e-9 for r in range(6) for c in range(8)
    )


def _config_bumped(o: Outcome) -> bool:
    saved = json.loads(Path("config.json").read_text())
    want = json.loads(json.dumps(CONFIG))
    want["model"]["params"]["n_estimators"] = 600
    return bool(saved == want)


def _ledger(v: Any) -> bool:
    rows = [tuple(r) for r in v.itertuples(index=False)]
    return rows == [*LEDGER, tuple(NEW_ROW.values())]


def _merged(v: Any) -> bool:
    name = dict(DEPTS)
    got = {r["emp"]: r["dept_name"] for _, r in v.iterrows()}
    return len(v) == len(STAFF) and got == {e: name[d] for e, d, _ in STAFF}


TASKS: tuple[NotebookTask, ...] = (
    # the transactions DataFrame: timestamps as text, merchants typed by hand
    NotebookTask(
        "groc_share",
        "tx",
        "what share of our spending in tx goes to groceries?",
        ratio(_CATEGORY["groceries"] / _TOTAL, 2e-3),
    ),
    NotebookTask(
        "top2_cat",
        "tx",
        "top 2 categories by total amount",
        names_only(set(_TOP2), list(_CATEGORY)),
    ),
    NotebookTask(
        "week_max",
        "tx",
        "ts is just text. parse it and sum amount per week (mon-sun), whats the highest weekly total",
        shows_number(max(_WEEK.values()), 1e-4),
    ),
    NotebookTask(
        "pivot",
        "tx",
        "pivot_table of tx with category as rows and month as columns, summing amount. "
        "how much on dining in july?",
        shows_number(_MONTH[(7, "dining")], 1e-4),
    ),
    NotebookTask(
        "merchant",
        "tx",
        "which merchant did we pay the most overall? careful the names are typed inconsistently",
        names_only(max(_MERCHANT, key=_MERCHANT.get), list(_MERCHANT)),
    ),
    NotebookTask(
        "money_str",
        "tx",
        "format the total of tx amount as money like $1,234.56 and keep it in total_str",
        kernel("total_str", lambda v: v == f"${_TOTAL:,.2f}"),
    ),
    # other shapes in the kernel
    NotebookTask(
        "dup_count",
        "frames",
        "how many duplicate rows does leads have",
        final_number(len(LEADS) - len(set(LEADS))),
    ),
    NotebookTask(
        "dedupe",
        "frames",
        "drop the duplicated rows from leads (keep the first one)",
        kernel("leads", _no_dupes),
    ),
    NotebookTask(
        "big_cities",
        "frames",
        "which cities in population have over 150k people",
        names_only({c for c, p in POPULATION.items() if p > 150_000}, list(POPULATION)),
    ),
    NotebookTask(
        "worst_store",
        "frames",
        "records is a list of dicts - make a df of it. which store has the highest return rate "
        "(returned/sold)?",
        names_only(max(_STORE_RATE, key=_STORE_RATE.get), sorted(_STORE_RATE)),
    ),
    NotebookTask(
        "p90_wait",
        "frames",
        "90th percentile of wait_min in er",
        shows_number(_p90(WAITS), 1e-4),
    ),
    NotebookTask(
        "grid_max",
        "numpy",
        "where is the max of grid? row, col",
        _position(_PEAK[1], _PEAK[2]),
    ),
    NotebookTask(
        "grid_norm",
        "numpy",
        "normalize each row of grid so it sums to 1, call the result grid_norm",
        kernel("grid_norm", _grid_norm),
    ),
    # text
    NotebookTask(
        "top_word",
        "text",
        "most frequent word in speech? ignore case + punctuation",
        names_only(_SPEECH_TOP[0][0], _SPEECH_NAMES),
    ),
    NotebookTask(
        "m2_mean",
        "text",
        "pull the m2 number out of each of the listings and give me the mean size",
        shows_number(statistics.mean(_M2), 1e-4),
    ),
    # files on disk
    NotebookTask(
        "cfg_lr",
        "files",
        "what learning rate is set in config.json",
        final_number(CONFIG["model"]["params"]["learning_rate"]),  # type: ignore[index]
    ),
    NotebookTask(
        "cfg_edit",
        "files",
        "set n_estimators to 600 in config.json and save the file",
        _config_bumped,
    ),
    NotebookTask(
        "tsv_site",
        "files",
        "air.tsv: avg pm25 by site, which site is the most polluted?",
        names_only(max(_PM25, key=_PM25.get), sorted(_PM25)),
    ),
    # real errors sent with %agent fix
    NotebookTask(
        "fix_typo",
        "fix",
        "%agent fix",
        shows_number(_TOTAL / len(TX), 1e-3),
        cell="avg_ticket = tx['amount'].mean()\nprint(f'avg ticket: {avg_tiket:.2f}')",
    ),
    NotebookTask(
        "fix_append",
        "fix",
        "%agent fix",
        kernel("ledger", _ledger),
        cell=f"ledger = ledger.append({NEW_ROW!r}, ignore_index=True)",
    ),
    NotebookTask(
        "fix_strip",
        "fix",
        "%agent fix",
        kernel("codes_clean", lambda v: list(v) == [c.strip().upper() for c in CODES]),
        cell="codes_clean = codes.strip().upper()",
    ),
    NotebookTask(
        "fix_int",
        "fix",
        "%agent fix",
        either(
            kernel("total_kg", lambda v: abs(v - sum(map(float, WEIGHTS_TXT))) < 1e-9),
            shows_number(sum(map(float, WEIGHTS_TXT))),
        ),
        cell="total_kg = sum(int(w) for w in weights_txt)\ntotal_kg",
    ),
    NotebookTask(
        "fix_merge",
        "fix",
        "%agent fix",
        kernel("m", _merged),
        cell="m = staff.merge(depts, on='dept_id')\nm.groupby('dept_name')['salary'].mean()",
    ),
)

assert len(TASKS) >= 16
assert len({t.name for t in TASKS}) == len(TASKS)


def by_name(names: Any = None) -> tuple[NotebookTask, ...]:
    if names is None:
        return TASKS
    table = {t.name: t for t in TASKS}
    return tuple(table[n] for n in names)
