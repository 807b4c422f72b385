# Experiment 3: speculative sampling. (to be filled in)

SPECULATIVE_OUTPUTS = []
