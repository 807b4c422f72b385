# Experiment 4: weight quantization. (to be filled in)

QUANT_OUTPUTS = []
