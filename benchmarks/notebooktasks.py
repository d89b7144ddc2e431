"""Realistic notebook tasks: what a data scientist types into ``%%agent`` mid-analysis.

Unlike ``tasksuite.TASKS`` (one-liners that name their data), these run in a kernel that
already holds an analysis (:data:`SETUP`: an ``orders`` DataFrame, a ``regions`` lookup table,
a ``products`` table whose prices are text, a list of ``scores``, a ``review`` text, names
typed by hand, functions defined in earlier cells) next to files on disk (``measurements.csv``,
``visits.csv`` with dates as text, ``events.json``, ``notes.txt``), and the prompts are written
as people write them: short, lower case, naming their own variables and never saying "use
python". Four tasks are real errors sent with ``%agent fix`` (the failing cell is run first,
:attr:`NotebookTask.cell`). The eight tasks of other shapes (merge, group, missing values, text
to numbers, dates as text, JSON, a plot saved to a file, cleaning strings) were written before
any tuning on this suite, to keep the tuning honest.

Judged strictly (``tasksuite.shows_number`` / ``shows_text`` / ``kernel``): a value counts only
from the output of code that ran without an error, or as the answer's last number when the
prompt does not hold it; a variable counts only when the kernel holds it with the right
content. Expected values are computed here from the same data, never typed in.

``python benchmarks/bench_local_tasks.py`` runs them (the default suite).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tasksuite import Outcome, kernel, shows_number, shows_text

# -- the data (also written into SETUP, so the checkers and the kernel agree) ---------------

CITIES = ["Lyon", "Paris", "Paris", "Nantes", "Lyon", "Paris", "Lille", "Nantes", "Paris", "Lyon"]
CITIES += ["Lille", "Paris", "Nantes", "Lyon", "Paris", "Lille", "Nantes", "Lyon", "Paris", "Lyon"]
CUSTOMERS = ["c01", "c02", "c03", "c01", "c04", "c05", "c02", "c06", "c07", "c03"]
CUSTOMERS += ["c08", "c02", "c09", "c04", "c10", "c08", "c06", "c11", "c05", "c12"]
AMOUNTS = [120.5, 35.0, 48.2, 310.0, 99.9, 15.75, 64.0, 220.0, 27.3, 185.4]
AMOUNTS += [42.0, 18.6, 140.0, 275.5, 33.3, 58.8, 91.0, 260.0, 22.4, 134.9]
QUANTITIES = [3, 1, 2, 6, 2, 1, 2, 5, 1, 4, 1, 1, 3, 7, 1, 2, 2, 6, 1, 3]
DISCOUNTS: list[Any] = [0.1, None, 0.0, 0.2, None, 0.0, 0.05, 0.1, None, 0.15]
DISCOUNTS += [0.0, None, 0.1, 0.25, 0.0, None, 0.05, 0.2, 0.0, 0.1]
SCORES = [71, 85, 64, 92, 78, 88, 59, 81, 95, 67, 74, 83]
REVIEW = (
    "The delivery was late again and the box was damaged, but support answered quickly "
    "and sent a replacement the next day, so overall I am satisfied with the service"
)
STATIONS = ["north", "south", "east", "west"] * 6
TEMPS = [12.1, 17.4, 14.2, 11.8, 13.0, 18.9, 15.1, 12.2, 11.7, 19.6, 14.8, 10.9]
TEMPS += [12.6, 21.3, 15.5, 11.4, 13.3, 20.1, 16.0, 12.9, 12.0, 18.2, 14.4, 11.1]
HUMIDITY = [81, 55, 67, 88, 79, 52, 70, 91, 84, 49, 66, 90]
HUMIDITY += [77, 47, 63, 93, 80, 51, 69, 86, 83, 58, 64, 89]
NOTES = [
    "check the outliers in march",
    "ask Marie about the lyon numbers",
    "refit the model with the new features",
    "",
    "export the figures for the report",
    "compare against last year's baseline",
    "clean up the duplicated customer ids",
]

_NOTES_TEXT = "\n".join(NOTES) + "\n"
# more shapes of data: a lookup table to merge, prices typed as text, dates as text in a CSV,
# JSON records, names typed by hand
REGIONS = {"Lyon": "south", "Paris": "north", "Nantes": "west", "Lille": "north"}
PRICE_TEXT = ["$1,299.00", "$24.50", "$310.75", "$8.99", "$1,050.00", "$72.30"]
DAYS = ["2024-03-28", "2024-03-30", "2024-04-02", "2024-04-09", "2024-04-15", "2024-04-21"]
DAYS += ["2024-04-30", "2024-05-01", "2024-05-06", "2024-05-19"]
VISITORS = [140, 95, 210, 188, 132, 240, 175, 160, 205, 99]
EVENTS = [
    {"ts": "2024-03-01T10:00:00", "level": "info", "msg": "started"},
    {"ts": "2024-03-01T10:05:12", "level": "error", "msg": "timeout on fetch"},
    {"ts": "2024-03-01T10:07:40", "level": "warning", "msg": "slow response"},
    {"ts": "2024-03-01T10:09:02", "level": "error", "msg": "disk full"},
    {"ts": "2024-03-01T10:15:33", "level": "info", "msg": "retry ok"},
    {"ts": "2024-03-01T10:16:01", "level": "error", "msg": "timeout on fetch"},
    {"ts": "2024-03-01T10:20:45", "level": "info", "msg": "done"},
]
RAW_CITIES = ["Lyon", " lyon", "PARIS", "Paris ", "paris", "Nantes", "  nantes ", "Lille", "Brest"]
SETUP = f"""\
import pandas as pd
import numpy as np
orders = pd.DataFrame({{
    "order_id": list(range(1001, 1021)),
    "customer": {CUSTOMERS!r},
    "city": {CITIES!r},
    "amount": {AMOUNTS!r},
    "quantity": {QUANTITIES!r},
    "discount": {DISCOUNTS!r},
    "date": pd.date_range("2024-03-01", periods=20, freq="D"),
}})
scores = {SCORES!r}
review = {REVIEW!r}
prices = ["3.5", "4", "2.25", "6.10"]


def f(x):
    return 2 * x**2 - 3


def discount(price, pct):
    return price * (1 - pct / 100)


def clean_name(s):
    return " ".join(s.split()).title()


def average(xs):
    return sum(xs) / len(xs)


pd.DataFrame({{"station": {STATIONS!r}, "temp_c": {TEMPS!r}, "humidity": {HUMIDITY!r}}}).to_csv(
    "measurements.csv", index=False
)
with open("notes.txt", "w") as fh:
    fh.write({_NOTES_TEXT!r})
pd.DataFrame({{"day": {DAYS!r}, "visitors": {VISITORS!r}}}).to_csv("visits.csv", index=False)
with open("events.json", "w") as fh:
    fh.write({json.dumps(EVENTS, indent=1)!r})
del fh
regions = pd.DataFrame({{"city": {list(REGIONS)!r}, "region": {list(REGIONS.values())!r}}})
products = pd.DataFrame({{"item": ["laptop", "mouse", "chair", "cable", "desk", "lamp"],
                         "price": {PRICE_TEXT!r}}})
raw_cities = {RAW_CITIES!r}
"""


@dataclass(frozen=True)
class NotebookTask:
    name: str
    kind: str  # "pandas" | "csv" | "function" | "text" | "fix"
    prompt: str  # what the user types (for "fix": shown as the %agent fix prompt is built)
    check: Callable[[Outcome], bool]
    cell: str = ""  # "fix" tasks: the cell that raises before ``%agent fix``

    def passed(self, outcome: Outcome) -> bool:
        try:
            return bool(self.check(outcome))
        except Exception:  # noqa: BLE001 - a checker looking at a broken namespace fails the task
            return False


def _frame(rows: int, column: str = "", test: Callable[[Any], bool] = lambda c: True):
    def ok(v: Any) -> bool:
        return (
            type(v).__name__ == "DataFrame"
            and len(v) == rows
            and (not column or (column in v.columns and test(v[column])))
        )

    return ok


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def _by(keys: list[str], values: list[float], how: Callable[[list[float]], float]) -> dict:
    groups: dict[str, list[float]] = {}
    for k, v in zip(keys, values):
        groups.setdefault(k, []).append(v)
    return {k: how(v) for k, v in groups.items()}


def _argmax(d: dict) -> str:
    return max(d, key=d.get)


_REVENUE = _by(CITIES, AMOUNTS, sum)
_ORDERS = _by(CITIES, AMOUNTS, len)
_HUMID = _by(STATIONS, HUMIDITY, _mean)
_WARM = _by(STATIONS, TEMPS, _mean)
assert _argmax(_REVENUE) != _argmax(_ORDERS)  # the two city questions have different answers


def _corr(xs: list[float], ys: list[float]) -> float:
    return statistics.correlation(xs, ys)


def _stdev(o: Outcome) -> bool:  # sample or population: both are right answers
    return shows_number(statistics.stdev(SCORES), 1e-3)(o) or shows_number(
        statistics.pstdev(SCORES), 1e-3
    )(o)


def _png(name: str) -> Callable[[Outcome], bool]:
    """The turn wrote a PNG image to ``name`` in the task's folder (the judge runs there)."""

    def check(o: Outcome) -> bool:
        path = Path(name)
        return path.is_file() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    return check


def _by_city_means(v: Any) -> bool:
    """A Series, a one-column DataFrame or a dict: city → mean quantity."""
    want = _by(CITIES, [float(q) for q in QUANTITIES], _mean)
    if type(v).__name__ == "DataFrame":
        v = v.set_index("city") if "city" in v.columns else v
        numeric = [c for c in v.columns if str(v[c].dtype) != "object"]
        if len(numeric) != 1:
            return False
        v = v[numeric[0]]
    got = dict(v.items()) if hasattr(v, "items") else {}
    return set(got) == set(want) and all(abs(float(got[k]) - want[k]) < 1e-6 for k in want)


def _filled(v: Any) -> bool:
    column = list(v["discount"])
    return (
        len(v) == len(DISCOUNTS)
        and all(c == c and c is not None for c in column)  # no NaN, no None
        and all(abs(c - (d or 0.0)) < 1e-9 for c, d in zip(column, DISCOUNTS))
    )


def _fixed_average(v: Any) -> bool:
    try:
        v([])  # no longer raises on an empty list
    except ZeroDivisionError:
        return False
    return v([2, 4]) == 3


TASKS: tuple[NotebookTask, ...] = (
    # pandas on a DataFrame already in the kernel
    NotebookTask(
        "avg_amount", "pandas", "what's the average order amount?", shows_number(_mean(AMOUNTS))
    ),
    NotebookTask(
        "top_city", "pandas", "which city has the most orders?", shows_text(_argmax(_ORDERS))
    ),
    NotebookTask(
        "revenue_city",
        "pandas",
        "which city brings in the most revenue (sum of amount)?",
        shows_text(_argmax(_REVENUE)),
    ),
    NotebookTask(
        "big_orders",
        "pandas",
        "how many orders are over 100?",
        shows_number(sum(a > 100 for a in AMOUNTS)),
    ),
    NotebookTask(
        "total_col",
        "pandas",
        "add a column total to orders that is amount times quantity",
        kernel(
            "orders",
            _frame(
                20,
                "total",
                lambda c: all(abs(t - a * q) < 1e-6 for t, a, q in zip(c, AMOUNTS, QUANTITIES)),
            ),
        ),
    ),
    NotebookTask(
        "customers",
        "pandas",
        "how many distinct customers do we have in orders?",
        shows_number(len(set(CUSTOMERS))),
    ),
    NotebookTask(
        "median_qty",
        "pandas",
        "median quantity per order?",
        shows_number(statistics.median(QUANTITIES)),
    ),
    NotebookTask(
        "lyon",
        "pandas",
        "put the Lyon orders in a new dataframe called lyon",
        kernel("lyon", _frame(CITIES.count("Lyon"), "city", lambda c: set(c) == {"Lyon"})),
    ),
    NotebookTask(
        "missing",
        "pandas",
        "how many missing values are there in orders?",
        shows_number(sum(d is None for d in DISCOUNTS)),
    ),
    NotebookTask(
        "corr",
        "pandas",
        "correlation between amount and quantity in orders?",
        shows_number(_corr(AMOUNTS, [float(q) for q in QUANTITIES]), 5e-3),
    ),
    # a CSV file on disk
    NotebookTask(
        "csv_rows", "csv", "how many rows are in measurements.csv?", shows_number(len(TEMPS))
    ),
    NotebookTask(
        "csv_max", "csv", "what's the highest temp_c in measurements.csv?", shows_number(max(TEMPS))
    ),
    NotebookTask(
        "csv_humid",
        "csv",
        "in measurements.csv, which station has the highest average humidity?",
        shows_text(_argmax(_HUMID)),
    ),
    NotebookTask(
        "csv_load",
        "csv",
        "load measurements.csv into a dataframe called meas",
        kernel("meas", _frame(len(TEMPS), "temp_c")),
    ),
    NotebookTask(
        "csv_warm",
        "csv",
        "mean temp_c per station from measurements.csv - which one is the warmest?",
        shows_text(_argmax(_WARM)),
    ),
    # functions defined in earlier cells
    NotebookTask("f3", "function", "what does f(3) return?", shows_number(15)),
    NotebookTask(
        "discount",
        "function",
        "use my discount function on a price of 80 with 25%",
        shows_number(60),
    ),
    NotebookTask(
        "clean",
        "function",
        "run clean_name on '  ada   LOVELACE ' and tell me the result",
        shows_text("Ada Lovelace", case=True),
    ),
    # text and statistics on kernel values and files
    NotebookTask(
        "notes_lines",
        "text",
        "how many non-empty lines are in notes.txt?",
        shows_number(sum(1 for n in NOTES if n)),
    ),
    NotebookTask(
        "words", "text", "how many words are in review?", shows_number(len(REVIEW.split()))
    ),
    NotebookTask("stdev", "text", "standard deviation of scores?", _stdev),
    NotebookTask(
        "top3",
        "text",
        "store the three highest scores in a list called top3, highest first",
        kernel("top3", lambda v: list(v) == sorted(SCORES, reverse=True)[:3]),
    ),
    # more shapes: merge, group, missing values, text to numbers, dates as text, JSON, plots
    NotebookTask(
        "merge_region",
        "pandas",
        "merge orders with regions on city. total amount for the north region?",
        shows_number(sum(a for a, c in zip(AMOUNTS, CITIES) if REGIONS[c] == "north"), 1e-4),
    ),
    NotebookTask(
        "group_qty",
        "pandas",
        "mean quantity per city in orders, save it as qty_by_city",
        kernel("qty_by_city", _by_city_means),
    ),
    NotebookTask(
        "fill_na",
        "pandas",
        "fill the missing discounts in orders with 0",
        kernel("orders", _filled),
    ),
    NotebookTask(
        "price_text",
        "pandas",
        "what's the total of the price column in products?",
        shows_number(sum(float(p.strip("$").replace(",", "")) for p in PRICE_TEXT), 1e-4),
    ),
    NotebookTask(
        "visits_april",
        "csv",
        "how many visitors in april? data is in visits.csv",
        shows_number(sum(v for d, v in zip(DAYS, VISITORS) if d[5:7] == "04")),
    ),
    NotebookTask(
        "json_errors",
        "text",
        "how many events in events.json have level error?",
        shows_number(sum(e["level"] == "error" for e in EVENTS)),
    ),
    NotebookTask(
        "plot_png",
        "csv",
        "bar chart of the total amount per city in orders, save it to city_amount.png",
        _png("city_amount.png"),
    ),
    NotebookTask(
        "raw_cities",
        "text",
        "how many different cities are in raw_cities if you ignore case and extra spaces?",
        shows_number(len({c.strip().lower() for c in RAW_CITIES})),
    ),
    # real errors, sent with %agent fix
    NotebookTask(
        "fix_key",
        "fix",
        "%agent fix",
        shows_number(sum(AMOUNTS)),
        cell="orders['amout'].sum()",
    ),
    NotebookTask(
        "fix_type",
        "fix",
        "%agent fix",
        shows_number(sum(float(p) for p in ["3.5", "4", "2.25", "6.10"])),
        cell="total_price = sum(prices)\ntotal_price",
    ),
    NotebookTask(
        "fix_file",
        "fix",
        "%agent fix",
        shows_number(len(TEMPS)),
        cell="df = pd.read_csv('measurment.csv')\nlen(df)",
    ),
    NotebookTask(
        "fix_zero",
        "fix",
        "%agent fix",
        kernel("average", _fixed_average),
        cell="average([])",
    ),
)


def by_name(names: Any = None) -> tuple[NotebookTask, ...]:
    if names is None:
        return TASKS
    table = {t.name: t for t in TASKS}
    return tuple(table[n] for n in names)
