# The report: milestones, HTML/Markdown, data exports, sampling workbench. (to be filled in)

REPORT_OUTPUTS = [*FOUNDATION_OUTPUTS, *KVCACHE_OUTPUTS, *SAMPLING_OUTPUTS, *SPECULATIVE_OUTPUTS, *QUANT_OUTPUTS]
