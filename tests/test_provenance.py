"""The machine stamp names the node that ran the job (cluster jobs land on different hosts)."""

import socket

from inferlab.jobs.machine import format_machine, machine_stamp


def test_machine_stamp_names_the_node_and_the_summary_shows_it():
    stamp = machine_stamp("cpu")
    assert stamp["node"] == socket.gethostname()
    assert f" on {stamp['node']}," in format_machine(stamp)


def test_summary_of_a_stamp_without_node_still_formats():
    stamp = {k: v for k, v in machine_stamp("cpu").items() if k != "node"}
    assert " on " not in format_machine(stamp).split(",")[0]
