"""Trivial notebook tasks with automatic checkers, for the embedded local model.

Each :class:`Task` is a prompt a newcomer might type into ``%%agent`` on the first day:
arithmetic and strings through python, defining variables in the kernel, small pandas
operations on a DataFrame the suite creates (``df``), and factual one-liners. A checker looks
at the :class:`Outcome` of the turn: the value in the kernel, a tool output, or the answer.

``python benchmarks/bench_local_tasks.py`` runs them through ``%%agent``;
``tests/test_local_tasks.py`` runs a fast subset and asserts a floor.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: Run in the kernel before every task: the DataFrame the pandas tasks work on.
SETUP = (
    "import pandas as pd\n"
    "df = pd.DataFrame({'name': ['Ann', 'Bob', 'Cid', 'Dee'], 'age': [28, 35, 42, 19],\n"
    "                   'city': ['Paris', 'Rome', 'Paris', 'Oslo']})\n"
)


@dataclass(frozen=True)
class Outcome:
    """What one turn produced: the final answer, the python tool's codes and outputs, the kernel;
    ``prompt`` is the task's (an answer that only repeats the question proves nothing)."""

    answer: str
    codes: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    namespace: Mapping[str, Any] = field(default_factory=dict)
    prompt: str = ""

    @property
    def results(self) -> str:
        """The outputs of the calls that ran without an error (a traceback quotes the code)."""
        from jupyter_session_agent.core.codeaction import is_error

        return "\n".join(o for o in self.outputs if not is_error(o))


@dataclass(frozen=True)
class Task:
    name: str
    kind: str  # "python" | "string" | "variable" | "pandas" | "fact"
    prompt: str
    check: Callable[[Outcome], bool]

    def passed(self, outcome: Outcome) -> bool:
        try:
            return bool(self.check(outcome))
        except Exception:  # noqa: BLE001 - a checker looking at a broken namespace fails the task
            return False


_NUMBER = re.compile(r"(?<![\w.])-?\d[\d,_]*(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w])")


def numbers(text: str) -> list[float]:
    """Every number written in ``text`` (``1,024``, ``3.5``, ``-2``)."""
    out = []
    for match in _NUMBER.findall(text or ""):
        try:
            out.append(float(match.replace(",", "").replace("_", "")))
        except ValueError:
            pass
    return out


def shows_number(expected: float, tol: float = 1e-6) -> Callable[[Outcome], bool]:
    """The number is in a successful output, or in the answer when the question did not say it."""

    def check(o: Outcome) -> bool:
        def has(text: str) -> bool:
            return any(math.isclose(n, expected, rel_tol=tol, abs_tol=tol) for n in numbers(text))

        last = numbers(o.answer)[-1:]  # the answer's conclusion, not a number on the way
        told = bool(last) and math.isclose(last[0], expected, rel_tol=tol, abs_tol=tol)
        return has(o.results) or (told and not has(o.prompt))

    return check


def shows_text(*expected: str, case: bool = False) -> Callable[[Outcome], bool]:
    """Every string is in a successful output, or in the answer when the question did not say
    it (case-insensitively unless ``case``)."""

    def check(o: Outcome) -> bool:
        fold = (lambda t: t) if case else str.lower
        results, answer, prompt = fold(o.results), fold(o.answer), fold(o.prompt)
        return all(
            fold(e) in results or (fold(e) in answer and fold(e) not in prompt) for e in expected
        )

    return check


def says(*expected: str) -> Callable[[Outcome], bool]:
    """The final answer itself contains one of the strings (case-insensitively)."""
    return lambda o: any(e.lower() in o.answer.lower() for e in expected)


def kernel(name: str, test: Callable[[Any], bool]) -> Callable[[Outcome], bool]:
    """The kernel holds ``name`` and ``test(value)`` is true."""
    return lambda o: name in o.namespace and bool(test(o.namespace[name]))


def _is_df(value: Any, rows: int) -> bool:
    return type(value).__name__ == "DataFrame" and len(value) == rows


TASKS: tuple[Task, ...] = (
    # arithmetic through python
    Task("pow", "python", "Compute 2**10 with python.", shows_number(1024)),
    Task(
        "sum100",
        "python",
        "What is the sum of the numbers from 1 to 100? Use python.",
        shows_number(5050),
    ),
    Task("mul", "python", "Use python to compute 17 * 23.", shows_number(391)),
    Task("fact", "python", "Compute the factorial of 6 with python.", shows_number(720)),
    Task("sqrt", "python", "What is the square root of 144? Use python.", shows_number(12)),
    Task("mod", "python", "Use python to compute 37 modulo 5.", shows_number(2)),
    Task("div", "python", "Compute 7 divided by 2 with python.", shows_number(3.5)),
    Task(
        "squares",
        "python",
        "Print the squares of 1 to 5 with python.",
        shows_text("1", "4", "9", "16", "25"),
    ),
    Task(
        "evens",
        "python",
        "Use python to count the even numbers between 1 and 20.",
        shows_number(10),
    ),
    Task("max", "python", "Use python to find the largest of 3, 17, 8 and 12.", shows_number(17)),
    # strings through python
    Task("reverse", "string", "Use python to reverse the string 'hello'.", shows_text("olleh")),
    Task(
        "upper",
        "string",
        "Use python to turn 'notebook' into upper case.",
        shows_text("NOTEBOOK", case=True),
    ),
    Task(
        "len",
        "string",
        "How many characters are in the word 'jupyter'? Use python.",
        shows_number(7),
    ),
    Task("count", "string", "Use python to count the letter 'a' in 'banana'.", shows_number(3)),
    Task(
        "join",
        "string",
        "Use python to join the words 'data' and 'science' with a space.",
        shows_text("data science"),
    ),
    Task(
        "split", "string", "Use python to split 'a,b,c' on commas.", shows_text("'a'", "'b'", "'c'")
    ),
    Task(
        "replace",
        "string",
        "Use python to replace 'cat' with 'dog' in 'my cat'.",
        shows_text("my dog"),
    ),
    # variables in the kernel
    Task("x42", "variable", "Set the variable x to 42 in python.", kernel("x", lambda v: v == 42)),
    Task(
        "names",
        "variable",
        "Create a python list called names with 'a', 'b' and 'c'.",
        kernel("names", lambda v: list(v) == ["a", "b", "c"]),
    ),
    Task(
        "sqlist",
        "variable",
        "Create a list called squares with the squares of 1 to 5 in python.",
        kernel("squares", lambda v: list(v) == [1, 4, 9, 16, 25]),
    ),
    Task(
        "double",
        "variable",
        "Define a python function double(n) that returns n times 2.",
        kernel("double", lambda f: f(4) == 8),
    ),
    Task(
        "ages",
        "variable",
        "Create a dict called ages where 'ann' is 30 and 'bob' is 25, in python.",
        kernel("ages", lambda v: dict(v) == {"ann": 30, "bob": 25}),
    ),
    Task(
        "total",
        "variable",
        "In python, set total to the sum of 10, 20 and 30.",
        kernel("total", lambda v: v == 60),
    ),
    Task(
        "greeting",
        "variable",
        "Set a python variable greeting to the string 'hello world'.",
        kernel("greeting", lambda v: v == "hello world"),
    ),
    # small pandas operations on df (see SETUP)
    Task(
        "rows", "pandas", "How many rows does the DataFrame df have? Use python.", shows_number(4)
    ),
    Task(
        "mean_age",
        "pandas",
        "What is the mean of the age column of the DataFrame df? Use python.",
        shows_number(31),
    ),
    Task(
        "max_age",
        "pandas",
        "What is the largest age in the DataFrame df? Use python.",
        shows_number(42),
    ),
    Task(
        "paris",
        "pandas",
        "Use python to count the rows of df whose city is 'Paris'.",
        shows_number(2),
    ),
    Task(
        "columns",
        "pandas",
        "Use python to show the column names of the DataFrame df.",
        shows_text("name", "age", "city"),
    ),
    Task(
        "older",
        "pandas",
        "Store the rows of df with age over 30 in a variable called older, in python.",
        kernel("older", lambda v: _is_df(v, 2)),
    ),
    Task(
        "sum_age",
        "pandas",
        "Use python to compute the sum of the age column of df.",
        shows_number(124),
    ),
    # factual one-liners
    Task("france", "fact", "What is the capital of France?", says("paris")),
    Task("japan", "fact", "What is the capital of Japan?", says("tokyo")),
    Task(
        "week",
        "fact",
        "How many days are in a week?",
        lambda o: 7 in numbers(o.answer) or "seven" in o.answer.lower(),
    ),
    Task("planet", "fact", "Which planet is the largest in our solar system?", says("jupiter")),
    Task("water", "fact", "What is the chemical formula of water?", says("h2o", "h₂o")),
    Task("sky", "fact", "What color is the sky on a clear day?", says("blue")),
)

#: A quick, representative subset (tests/test_local_tasks.py asserts a floor on it).
FAST = ("pow", "sum100", "reverse", "x42", "rows", "mean_age", "france", "week")


def by_name(names: Any = None) -> tuple[Task, ...]:
    if names is None:
        return TASKS
    wanted = list(names)
    table = {t.name: t for t in TASKS}
    return tuple(table[n] for n in wanted)
