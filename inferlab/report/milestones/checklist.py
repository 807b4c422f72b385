"""The seed's four acceptance milestones, checked on the measured tables (milestones/common.py says how).

An unmet milestone is a "fail" that shows its numbers; nothing is adjusted to make it pass."""

from __future__ import annotations

from inferlab.report.inputs import ReportInputs
from inferlab.report.milestones.common import Milestone
from inferlab.report.milestones.kvcache import check_m1
from inferlab.report.milestones.quant import check_m4
from inferlab.report.milestones.sampling import check_m2
from inferlab.report.milestones.speculative import check_m3


def check_all(data: ReportInputs, machine_fallback: dict | None = None) -> list[Milestone]:
    return [check(data, machine_fallback) for check in (check_m1, check_m2, check_m3, check_m4)]
