"""The guard's watch over the weights themselves: an exact per-tensor fingerprint taken after
each optimizer step (`fingerprint`), and the rules that judge each tensor's reading for
corruption that stays finite (`rules`). Torch, inside the training process, like the rest of
`inspector.guard`.
"""
