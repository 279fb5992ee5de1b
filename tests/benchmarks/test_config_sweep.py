"""The config sweep's weights digest: bit-equal weights agree, one flipped bit does not."""

import torch

from benchmarks.config_sweep import weights_digest


def test_digest_tells_bit_equal_weights_from_a_flipped_bit():
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        w = torch.randn(257, 6, generator=torch.Generator().manual_seed(0)).to(dtype)
        same = w.clone()
        assert weights_digest(w) == weights_digest(same)
        bits = w.reshape(-1).view(torch.int16 if w.element_size() == 2 else torch.int32).clone()
        bits[100] ^= 1  # the lowest mantissa bit of one value
        flipped = bits.view(dtype).reshape(w.shape)
        assert not torch.equal(w, flipped) and weights_digest(w) != weights_digest(flipped)
    odd = torch.ones(3, dtype=torch.float16)  # 6 bytes: read as int16
    assert weights_digest(odd) == [3 * 15360, 3 * (15360 % 1000003) * (15360 % 7919)]
