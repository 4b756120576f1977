import pytest
import torch

from workbench.quant.packing import codes_per_byte, pack, packed_cols, unpack


@pytest.mark.parametrize("bits", [2, 3, 4, 5, 6, 7, 8])
@pytest.mark.parametrize("n", [1, 7, 64, 129])
def test_pack_roundtrip(bits, n):
    g = torch.Generator().manual_seed(bits * 1000 + n)
    q = torch.randint(0, 1 << bits, (5, n), generator=g).to(torch.uint8)
    p = pack(q, bits)
    assert p.dtype == torch.uint8
    assert p.shape == (5, packed_cols(n, bits))
    assert torch.equal(unpack(p, bits, n), q)


def test_int4_nibble_order_and_sizes():
    q = torch.tensor([[1, 2, 15, 0]], dtype=torch.uint8)
    assert pack(q, 4).tolist() == [[0x21, 0x0F]]  # element 2j low nibble, 2j+1 high nibble
    assert codes_per_byte(4) == 2 and codes_per_byte(8) == 1 and codes_per_byte(2) == 4
    assert codes_per_byte(3) == 0  # INT3: bit stream, 8 codes in 3 bytes
    assert packed_cols(64, 3) == 24 and packed_cols(9, 3) == 6 and packed_cols(64, 4) == 32
    assert pack(torch.tensor([[3, 0, 1, 2]], dtype=torch.uint8), 2).tolist() == [[3 | (1 << 4) | (2 << 6)]]


def test_pack_rejects_out_of_range():
    with pytest.raises(ValueError, match=r"\[0, 15\]"):
        pack(torch.tensor([[16]]), 4)


@pytest.mark.parametrize("bits", [2, 4])
def test_stream_layout_equals_nibble_layout(bits):
    from workbench.quant.packing import _pack_stream

    q = torch.randint(0, 1 << bits, (3, 64), generator=torch.Generator().manual_seed(0)).to(torch.uint8)
    assert torch.equal(_pack_stream(q, bits), pack(q, bits))


def test_int3_known_bytes():
    # codes 1..7,0 -> v = sum q_i << 3i; bytes are v's little-endian bytes
    q = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 0]], dtype=torch.uint8)
    v = sum(int(c) << (3 * i) for i, c in enumerate(q[0]))
    assert pack(q, 3).tolist() == [[(v >> 0) & 255, (v >> 8) & 255, (v >> 16) & 255]]
