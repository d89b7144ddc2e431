"""An unseen suite for issue 26's review: realistic notebook tasks the tuned suite does not hold.

Written by a reviewer who did not write the changes of issue 26, before running the model on
them, to check ``notebooktasks.py``'s 34 tasks do not overstate the default model. Different
data and shapes: a ``sales`` DataFrame on a datetime index (resample per month, rolling mean,
weekdays), a ``survey`` of categorical answers (crosstab, fractions), a ``grades`` dict of
lists, a ``stock`` list of closing prices (percent change), a ``latency`` list with outliers
(the IQR rule), a ``contacts`` list of e-mail addresses, a ``raw`` DataFrame with spreadsheet
column names, and on disk an ``app.log`` to parse with a regex and two CSVs to join on keys of
different names (``customers.csv``, ``invoices.csv``). Four are real errors sent with
``%agent fix`` (a KeyError, str + int in a function, an off-by-one IndexError in a function), and
one is a pandas chained assignment that silently does nothing (copy-on-write), which the user
describes.

Judged as strictly as ``notebooktasks.py`` (``tasksuite.shows_number`` / ``kernel``), and a
name is judged more strictly than ``shows_text``: the answer, or the last successful output,
names the right candidate and none of the others (printing the whole data names them all).
Expected values are computed here from the same data, never typed in.

Run: ``python benchmarks/bench_local_tasks.py --suite review -v``.
"""

from __future__ import annotations

import datetime as dt
import re
import statistics
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from notebooktasks import NotebookTask
from tasksuite import Outcome, kernel, numbers, shows_number

# -- the data (also written into SETUP, so the checkers and the kernel agree) ---------------

START = dt.date(2024, 1, 1)
DAYS = [START + dt.timedelta(days=i) for i in range(91)]  # 2024-01-01 .. 2024-03-31
UNITS = [20 + (i * 37) % 23 + (14 if d.weekday() == 5 else 0) for i, d in enumerate(DAYS)]
PRICE = {1: 9.5, 2: 10.25, 3: 9.0}  # unit price by month
REVENUE = [round(u * PRICE[d.month], 2) for u, d in zip(UNITS, DAYS)]

TEAMS = ["sales", "support", "dev", "dev", "sales", "support", "dev", "sales", "hr", "dev"]
TEAMS += ["support", "sales", "dev", "hr", "sales", "dev", "support", "sales", "dev", "hr"]
TEAMS += ["sales", "dev", "support", "sales", "dev"]
ANSWERS = ["yes", "no", "yes", "maybe", "no", "yes", "yes", "no", "yes", "no"]
ANSWERS += ["maybe", "no", "yes", "yes", "yes", "no", "yes", "maybe", "yes", "no"]
ANSWERS += ["no", "yes", "no", "maybe", "yes"]
RATINGS = [4, 2, 5, 3, 1, 4, 5, 2, 4, 3, 3, 1, 5, 4, 4, 2, 5, 3, 4, 2, 1, 5, 2, 3, 4]

GRADES = {
    "amina": [14, 12, 17, 15],
    "bruno": [16, 9, 13, 18],
    "chloe": [11, 15, 14, 12],
    "dmitri": [18, 13, 12, 14],
    "elena": [13, 17, 16, 11],
}
STOCK = [101.2, 102.8, 99.5, 98.7, 103.4, 105.1, 104.0, 107.9, 106.3, 110.2, 108.8, 112.5]
LATENCY = [112, 98, 105, 120, 101, 97, 430, 110, 103, 99, 115, 108, 96, 102, 118, 12, 104]
LATENCY += [109, 100, 890, 106, 111, 95, 107]
CONTACTS = [
    "ana.ruiz@acme.io",
    "tom@globex.com",
    "li.wei@acme.io",
    "sara.k@initech.org",
    "j.doe@globex.com",
    "mike@acme.io",
    "nora@initech.org",
    "paul.b@acme.io",
    "zoe@globex.com",
]
RAW_COLUMNS = ["Customer ID", "Order Date", "Unit Price", "Qty Ordered"]
SNAKE = ["customer_id", "order_date", "unit_price", "qty_ordered"]

LOG = [
    ("2024-05-02 08:00:01", "INFO", "auth", 35),
    ("2024-05-02 08:00:07", "ERROR", "db", 1250),
    ("2024-05-02 08:01:13", "INFO", "api", 88),
    ("2024-05-02 08:02:40", "WARN", "api", 640),
    ("2024-05-02 08:03:02", "ERROR", "api", 910),
    ("2024-05-02 08:03:55", "INFO", "db", 41),
    ("2024-05-02 08:04:30", "ERROR", "db", 1302),
    ("2024-05-02 08:05:12", "INFO", "auth", 29),
    ("2024-05-02 08:06:00", "ERROR", "db", 1175),
    ("2024-05-02 08:06:45", "INFO", "api", 93),
    ("2024-05-02 08:07:20", "ERROR", "auth", 415),
    ("2024-05-02 08:08:09", "INFO", "api", 77),
]
LOG_TEXT = "".join(f"{t} {lvl} [{mod}] request handled in {ms}ms\n" for t, lvl, mod, ms in LOG)

CUSTOMERS = [(1, "Ada", "Germany"), (2, "Ben", "France"), (3, "Cleo", "Germany")]
CUSTOMERS += [(4, "Dan", "Spain"), (5, "Eva", "France"), (6, "Finn", "Germany")]
INVOICES = [(5, 120.0), (1, 89.9), (3, 240.5), (2, 56.0), (6, 310.25), (1, 45.1), (4, 99.0)]
INVOICES += [(3, 18.75), (5, 64.3), (6, 12.0), (2, 150.0)]

INVENTORY = {"apples": 42, "pears": 17, "bananas": 28, "plums": 9}

SETUP = f"""\
import pandas as pd
import numpy as np
sales = pd.DataFrame(
    {{"units": {UNITS!r}, "revenue": {REVENUE!r}}},
    index=pd.date_range("{START.isoformat()}", periods={len(DAYS)}, freq="D", name="day"),
)
survey = pd.DataFrame({{"team": {TEAMS!r}, "satisfied": {ANSWERS!r}, "rating": {RATINGS!r}}})
survey["satisfied"] = survey["satisfied"].astype("category")
grades = {GRADES!r}
stock = {STOCK!r}
latency = {LATENCY!r}
contacts = {CONTACTS!r}
raw = pd.DataFrame([[101, "2024-02-01", 3.5, 2], [102, "2024-02-03", 12.0, 1]],
                   columns={RAW_COLUMNS!r})
inventory = {INVENTORY!r}


def diffs(xs):
    return [xs[i + 1] - xs[i] for i in range(len(xs))]


def describe_sales(df):
    return "Rows: " + len(df)


with open("app.log", "w") as fh:
    fh.write({LOG_TEXT!r})
del fh
pd.DataFrame({[dict(zip(("cust_id", "name", "country"), c)) for c in CUSTOMERS]!r}).to_csv(
    "customers.csv", index=False
)
pd.DataFrame({[dict(zip(("customer_ref", "total"), i)) for i in INVOICES]!r}).to_csv(
    "invoices.csv", index=False
)
"""

# -- the judge ------------------------------------------------------------------------------


def names_only(expected: str | set[str], candidates: list[str]) -> Callable[[Outcome], bool]:
    """The final answer, or the last successful output, names ``expected`` (one name, or each
    of a set) and no other candidate (whole words, case-insensitively): printing all the data
    is not an answer."""
    want = {expected} if isinstance(expected, str) else set(expected)
    fold = {c.lower() for c in want}

    def one(text: str) -> bool:
        found = {c.lower() for c in candidates if re.search(rf"\b{re.escape(c)}\b", text, re.I)}
        return found == fold

    def check(o: Outcome) -> bool:
        from jupyter_session_agent.core.codeaction import is_error

        ok = [out for out in o.outputs if not is_error(out)]
        return one(o.answer) or bool(ok and one(ok[-1]))

    return check


def either(*checks: Callable[[Outcome], bool]) -> Callable[[Outcome], bool]:
    return lambda o: any(c(o) for c in checks)


def ratio(fraction: float, tol: float = 1e-3) -> Callable[[Outcome], bool]:
    """A fraction, given as 0.44 or as 44 (%)."""
    return either(shows_number(fraction, tol), shows_number(100 * fraction, tol))


def _month_sums() -> dict[int, float]:
    sums: dict[int, float] = {}
    for d, r in zip(DAYS, REVENUE):
        sums[d.month] = sums.get(d.month, 0.0) + r
    return sums


_WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]


def _best_weekday() -> str:
    by: dict[int, list[int]] = {}
    for d, u in zip(DAYS, UNITS):
        by.setdefault(d.weekday(), []).append(u)
    return _WEEKDAYS[max(by, key=lambda k: statistics.mean(by[k]))]


def _iqr_outliers() -> int:
    # numpy's default percentile (linear) is statistics' "inclusive" method
    q1, _, q3 = statistics.quantiles(LATENCY, n=4, method="inclusive")
    low, high = q1 - 1.5 * (q3 - q1), q3 + 1.5 * (q3 - q1)
    return sum(x < low or x > high for x in LATENCY)


def _best_student() -> str:
    return max(GRADES, key=lambda k: statistics.mean(GRADES[k]))


def _top_module() -> str:
    errors = Counter(mod for _, lvl, mod, _ in LOG if lvl == "ERROR")
    return errors.most_common(1)[0][0]


def _country_total(country: str) -> float:
    where = {cid: c for cid, _, c in CUSTOMERS}
    return sum(t for ref, t in INVOICES if where[ref] == country)


def _snake(v: Any) -> bool:
    return type(v).__name__ == "DataFrame" and list(v.columns) == SNAKE and len(v) == 2


def _big_csv(name: str, threshold: int) -> Callable[[Outcome], bool]:
    """The folder holds ``name``: the sales rows with units above ``threshold``."""

    def check(o: Outcome) -> bool:
        import pandas as pd

        if not Path(name).is_file():
            return False
        frame = pd.read_csv(name)
        want = sorted(u for u in UNITS if u > threshold)
        return "units" in frame.columns and sorted(frame["units"]) == want

    return check


def _promo(v: Any) -> bool:
    """``sales`` has a promo column, true exactly where units > 40 (NaN/False elsewhere)."""
    flags = [bool(x) and x == x for x in v["promo"]]
    return len(v) == len(UNITS) and flags == [u > 40 for u in UNITS]


def _fixed_diffs(v: Any) -> bool:
    return v([3, 5, 9, 10]) == [2, 4, 1] and v([1]) == []


def _fixed_describe(v: Any) -> bool:
    out = v(pd_frame(5))
    return isinstance(out, str) and numbers(out) == [5.0]


def pd_frame(rows: int) -> Any:
    import pandas as pd

    return pd.DataFrame({"x": range(rows)})


_SUMS = _month_sums()

TASKS: tuple[NotebookTask, ...] = (
    # a DataFrame on a datetime index
    NotebookTask(
        "month_best",
        "timeseries",
        "resample sales by month - what's the revenue of the best month?",
        shows_number(max(_SUMS.values()), 1e-4),
    ),
    NotebookTask(
        "rolling7",
        "timeseries",
        "7 day rolling mean of units in sales, what's the latest value",
        shows_number(statistics.mean(UNITS[-7:]), 1e-3),
    ),
    NotebookTask(
        "weekday",
        "timeseries",
        "on which day of the week do we sell the most units on average?",
        names_only(_best_weekday(), _WEEKDAYS),
    ),
    NotebookTask(
        "feb_units",
        "timeseries",
        "total units sold in february?",
        shows_number(sum(u for u, d in zip(UNITS, DAYS) if d.month == 2)),
    ),
    NotebookTask(
        "pct_change",
        "stats",
        "by how many percent did stock go up from the first close to the last one",
        shows_number(100 * (STOCK[-1] - STOCK[0]) / STOCK[0], 1e-3),
    ),
    NotebookTask(
        "iqr",
        "stats",
        "how many outliers are in latency by the usual 1.5 IQR rule",
        shows_number(_iqr_outliers()),
    ),
    # categorical answers, a dict of lists, strings
    NotebookTask(
        "crosstab",
        "survey",
        "crosstab team vs satisfied in survey. how many people in dev said yes?",
        shows_number(sum(t == "dev" and a == "yes" for t, a in zip(TEAMS, ANSWERS))),
    ),
    NotebookTask(
        "frac_yes",
        "survey",
        "what fraction of respondents are satisfied (answered yes)?",
        ratio(ANSWERS.count("yes") / len(ANSWERS)),
    ),
    NotebookTask(
        "rating_team",
        "survey",
        "average rating by team, which team is least happy?",
        names_only(
            min(
                set(TEAMS),
                key=lambda t: statistics.mean(r for r, x in zip(RATINGS, TEAMS) if x == t),
            ),
            sorted(set(TEAMS)),
        ),
    ),
    NotebookTask(
        "grades",
        "dict",
        "who has the best average in grades?",
        names_only(_best_student(), list(GRADES)),
    ),
    NotebookTask(
        "domains",
        "dict",
        "which email domain shows up most often in contacts",
        names_only(
            Counter(c.split("@")[1] for c in CONTACTS).most_common(1)[0][0],
            sorted({c.split("@")[1] for c in CONTACTS}),
        ),
    ),
    NotebookTask(
        "snake",
        "dict",
        "rename the columns of raw to snake_case (in place, keep raw)",
        kernel("raw", _snake),
    ),
    # files on disk
    NotebookTask(
        "log_errors",
        "files",
        "parse app.log - which module logs the most ERROR lines?",
        names_only(_top_module(), sorted({m for *_, m, _ in LOG})),
    ),
    NotebookTask(
        "log_ms",
        "files",
        "average response time in ms over all the lines of app.log?",
        shows_number(statistics.mean(ms for *_, ms in LOG), 1e-4),
    ),
    NotebookTask(
        "join_csv",
        "files",
        "join invoices.csv with customers.csv (customer_ref = cust_id). total invoiced for germany?",
        shows_number(_country_total("Germany"), 1e-4),
    ),
    NotebookTask(
        "save_csv",
        "files",
        "save the days of sales with more than 40 units to big_days.csv",
        _big_csv("big_days.csv", 40),
    ),
    # a silent pandas mistake the user describes, and real errors sent with %agent fix
    NotebookTask(
        "chained",
        "fix",
        "i ran sales[sales['units'] > 40]['promo'] = True but sales has no promo column after. "
        "fix it so it does",
        kernel("sales", _promo),
    ),
    NotebookTask(
        "fix_keyerr",
        "fix",
        "%agent fix",
        either(
            shows_number(INVENTORY["apples"] + INVENTORY["bananas"]),
            kernel("stock_fruit", lambda v: v == INVENTORY["apples"] + INVENTORY["bananas"]),
        ),
        cell="stock_fruit = inventory['apples'] + inventory['banana']\nstock_fruit",
    ),
    NotebookTask(
        "fix_strint",
        "fix",
        "%agent fix",
        kernel("describe_sales", _fixed_describe),
        cell="describe_sales(sales)",
    ),
    NotebookTask(
        "fix_index",
        "fix",
        "%agent fix",
        kernel("diffs", _fixed_diffs),
        cell="diffs(stock)",
    ),
)

assert len(TASKS) >= 16


def by_name(names: Any = None) -> tuple[NotebookTask, ...]:
    if names is None:
        return TASKS
    table = {t.name: t for t in TASKS}
    return tuple(table[n] for n in names)
