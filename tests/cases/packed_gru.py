"""pack_padded_sequence (unsorted lengths) into a GRU; backward through the packed batch."""

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence

torch.manual_seed(0)
gru = nn.GRU(input_size=3, hidden_size=2)
seqs = torch.randn(3, 2, 3, requires_grad=True)  # (time, batch, features)
packed = pack_padded_sequence(seqs, torch.tensor([1, 3]), enforce_sorted=False)
_, h = gru(packed)
loss = h.pow(2).sum()
loss.backward()
print(seqs.grad[1:, 0])  # zeros: sequence 0 has length 1
print(gru.bias_ih_l0.grad)
