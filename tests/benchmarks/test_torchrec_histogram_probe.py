"""The FP64 step the histogram probe measures TorchRec's backward against."""

import math

import torch

from benchmarks.torchrec_histogram_probe import adagrad_step_fp64


def test_the_fp64_step_moves_read_rows_by_their_normalized_gradient_and_leaves_the_rest():
    weights = torch.tensor([[1.0, 2.0], [5.0, 6.0], [-1.0, 0.5]], dtype=torch.float16)
    ids = torch.tensor([0, 0, 2])          # row 0 twice (bags 0 and 1), row 2 once (bag 1), row 1 never
    offsets = torch.tensor([0, 1, 3])
    dout = torch.tensor([[1.0, 1.0], [2.0, 3.0]])
    got = adagrad_step_fp64(weights, ids, offsets, dout, lr=0.5, eps=0.0)
    g0 = torch.tensor([3.0, 4.0], dtype=torch.float64)   # bag 0's row plus bag 1's row
    rms0 = math.sqrt((9.0 + 16.0) / 2)
    assert torch.allclose(got[0], weights[0].double() - 0.5 * g0 / rms0)
    assert torch.equal(got[1], weights[1].double())
    g2 = torch.tensor([2.0, 3.0], dtype=torch.float64)
    assert torch.allclose(got[2], weights[2].double() - 0.5 * g2 / math.sqrt((4.0 + 9.0) / 2))
