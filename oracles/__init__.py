"""Oracles: the FP64 PyTorch reference (the authority), FBGEMM's CPU TBE, and error bounds."""
