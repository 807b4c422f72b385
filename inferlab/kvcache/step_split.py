"""The profile table's columns for where a compiled step's time goes (NaN on eager).

``inferlab.kvcache.bench`` writes them and M1's explanation reads them by these names. Torch-free,
so the report imports them without importing the benchmark.
"""

STEP_SPLIT_PARTS = ("entry_ms", "graph_code_ms", "kernel_ms")  # sum to split_step_ms
STEP_SPLIT_COLUMNS = ("split_step_ms", *STEP_SPLIT_PARTS, "kernel_events")
