# Experiment 2: sampling grid. (to be filled in)

SAMPLING_OUTPUTS = []
