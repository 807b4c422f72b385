"""Each milestone check reads exactly the columns its tables declare, and requires exactly the tables its spec
requires.

A check sees a table only through ReportInputs.view: the columns its spec declares (Table.reads and
Table.reads_if_present). So a plain read of an undeclared column fails on its own; these tests catch the rest:
a guarded read ("x" in df, row.get("x")) the view would let go quietly, and a declared column no check reads.
A column counts as read when the check's outcome on real-shaped tables (tests/test_report.py's fixtures)
changes between hiding it from the view and showing it with its values perturbed (a flag also as it is): that
sees through pandas (pivot, groupby, a row's .get) without instrumenting it.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import pandas as pd
import pytest

from inferlab.experiments import MILESTONES, TABLES
from inferlab.report.inputs import ReportInputError, ReportInputs
from inferlab.report.milestones.common import MISSING
from inferlab.report.milestones.kvcache import check_m1
from inferlab.report.milestones.quant import check_m4
from inferlab.report.milestones.sampling import check_m2
from inferlab.report.milestones.speculative import check_m3
from inferlab.spec import Table
from tests.test_report import MACHINE, full_data, sampling_tables

CHECKS = {"M1": check_m1, "M2": check_m2, "M3": check_m3, "M4": check_m4}


def every_table() -> ReportInputs:
    """test_report's tables, with the step probes and the profiler's contention flag as kvcache_steps writes
    them (test_report's fixture has no use for either)."""
    steps = pd.DataFrame([{"engine": engine, "engine_used": engine, "mode": mode, "positions": 64, "rep": 0,
                           "step_ms": 1.0, "contended": False}
                          for engine in ("eager", "compiled") for mode in ("cache", "no_cache")])
    data = full_data(kv_steps=steps)
    data.tables["kv_profile"] = data.tables["kv_profile"].assign(contended=False)
    return data


def threshold_default() -> ReportInputs:
    """The old in-corpus floor rule's default record, whose columns differ from the human-match rule's."""
    return full_data(sp_default=sampling_tables(rule="threshold")["sp_default"])


# (how the inputs are built, the tables to probe in them): the second scenario adds only its own table's columns
SCENARIOS: list[tuple[Callable[[], ReportInputs], tuple[str, ...] | None]] = [
    (every_table, None), (threshold_default, ("sp_default",))]


@pytest.fixture(scope="module")
def scenarios() -> list[tuple[ReportInputs, tuple[str, ...] | None]]:
    return [(build(), keys) for build, keys in SCENARIOS]


def declared(table: Table) -> set[str]:
    return {*table.reads, *table.reads_if_present}


def outcome(check, data: ReportInputs) -> str:
    """Everything the check decides, or the error it stops with, as text to compare."""
    try:
        m = check(data, MACHINE)
    except Exception as err:
        return f"{type(err).__name__}: {err}"
    return repr((m.status, m.evidence, m.stamps, m.missing_inputs, m.problems))


def perturbed(value):
    """A different value of the same kind, so that a use of it shows in the outcome."""
    if isinstance(value, bool | np.bool_):
        return not value
    if isinstance(value, numbers.Number):
        return value * 3 + 1
    if isinstance(value, str):
        return f"{value}~"
    return value


def variants(values: pd.Series) -> list[pd.Series]:
    """A column's values to show the check: perturbed, and as they are where perturbing a flag can only give its
    other value, which may be the one the check assumes when the column is absent."""
    flag = values.map(lambda v: isinstance(v, bool | np.bool_)).all()
    return [values.map(perturbed), *([values] if flag else [])]


@contextmanager
def shown(data: ReportInputs, key: str, column: str, values: pd.Series | None) -> Iterator[None]:
    """The check sees `column` of table `key` (as read when present) with these values; None: does not see it."""
    table, df = TABLES[key], data.tables[key]
    kept = tuple(c for c in table.reads_if_present if c != column)
    TABLES[key] = dataclasses.replace(table, reads=tuple(c for c in table.reads if c != column),
                                      reads_if_present=kept if values is None else (*kept, column))
    if values is not None:
        data.tables[key] = df.assign(**{column: values})
    try:
        yield
    finally:
        TABLES[key], data.tables[key] = table, df


def columns_read(check, data: ReportInputs, keys) -> set[tuple[str, str]]:
    """Every (table, column) among `keys` whose hiding or showing changes what the check decides."""
    found, as_declared = set(), outcome(check, data)
    for key in keys:
        for column in data.tables[key].columns:
            hidden = as_declared
            if column in declared(TABLES[key]):
                with shown(data, key, column, None):
                    hidden = outcome(check, data)
            for values in variants(data.tables[key][column]):
                with shown(data, key, column, values):
                    if outcome(check, data) != hidden:
                        found.add((key, column))
                        break
    return found


@pytest.mark.parametrize("milestone", CHECKS)
def test_a_check_reads_exactly_the_columns_its_tables_declare(milestone, scenarios):
    check, spec = CHECKS[milestone], MILESTONES[milestone]
    read = set()
    for data, keys in scenarios:
        probed = [k for k in spec.inputs if (keys is None or k in keys) and data.tables.get(k) is not None]
        read |= columns_read(check, data, probed)
    undeclared = [f"{check.__name__} reads {key}.{column}, which table {key} does not declare"
                  for key, column in sorted(read) if column not in declared(TABLES[key])]
    unread = [f"table {key} declares {column}, which {check.__name__} never reads"
              for key in spec.inputs for column in sorted(declared(TABLES[key])) if (key, column) not in read]
    assert not undeclared + unread, "\n".join(undeclared + unread)


def test_only_a_milestones_inputs_declare_columns():
    inputs = {key for spec in MILESTONES.values() for key in spec.inputs}
    assert not [key for key, table in TABLES.items() if declared(table) and key not in inputs]


def tables_opened(check, data: ReportInputs, monkeypatch) -> tuple[set[str], set[str]]:
    """The tables the check views and those it requires; reading a whole table (around its view) fails."""
    viewed, required = set(), set()
    view, require = ReportInputs.view, ReportInputs.require
    monkeypatch.setattr(ReportInputs, "view", lambda self, key: viewed.add(key) or view(self, key))
    monkeypatch.setattr(ReportInputs, "require", lambda self, key: required.add(key) or require(self, key))
    monkeypatch.setattr(ReportInputs, "table", lambda self, key: pytest.fail(
        f"{check.__name__} reads the whole table {key}, around the columns it declares"))
    check(data, MACHINE)
    return viewed, required


@pytest.mark.parametrize("milestone", CHECKS)
def test_a_check_reads_its_inputs_and_requires_only_its_required_tables(milestone, scenarios, monkeypatch):
    check, spec = CHECKS[milestone], MILESTONES[milestone]
    viewed, required = tables_opened(check, scenarios[0][0], monkeypatch)
    assert viewed <= set(spec.inputs), f"{check.__name__} reads {sorted(viewed - set(spec.inputs))}, not inputs"
    assert not required & set(spec.optional), f"{milestone} requires {sorted(required & set(spec.optional))}, " \
                                              "which its spec marks optional"
    assert required <= set(spec.required), f"{milestone} requires {sorted(required - set(spec.required))}, " \
                                           "which its spec does not"


def _checked_without(milestone: str, data, key: str):
    """The milestone checked with table `key` absent (put back afterwards)."""
    table, data.tables[key] = data.tables[key], None
    try:
        return CHECKS[milestone](data, MACHINE)
    finally:
        data.tables[key] = table


@pytest.mark.parametrize("milestone", CHECKS)
def test_without_an_optional_table_a_milestone_is_still_decided(milestone, scenarios):
    for key in MILESTONES[milestone].optional:
        m = _checked_without(milestone, scenarios[0][0], key)
        assert m.status != MISSING, (milestone, key, m.missing_inputs)


@pytest.mark.parametrize("milestone", CHECKS)
def test_without_a_required_table_a_milestone_is_missing(milestone, scenarios):
    for key in MILESTONES[milestone].required:
        m = _checked_without(milestone, scenarios[0][0], key)
        assert m.status == MISSING and key in m.missing_inputs, (milestone, key, m.status)


def test_a_view_holds_the_declared_columns_in_the_tables_order_and_names_one_it_lacks():
    data = full_data()
    summary = data.tables["kv_summary"]
    assert list(data.view("kv_summary").columns) == [c for c in summary.columns if c in declared(TABLES["kv_summary"])]
    assert data.view("kv_steps") is None
    data.tables["kv_summary"], data.paths["kv_summary"] = summary.drop(columns="mode"), "results/kv/summary.parquet"
    with pytest.raises(ReportInputError, match=r"results/kv/summary.parquet.*\['mode'\]"):
        data.view("kv_summary")
