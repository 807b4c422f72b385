# Experiment 1: KV cache vs no cache, and the roofline. (to be filled in)

KVCACHE_OUTPUTS = []
