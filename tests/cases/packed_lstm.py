"""pack_padded_sequence into an LSTM: padded steps take no part in the loss or its gradients."""

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

torch.manual_seed(0)
lstm = nn.LSTM(input_size=2, hidden_size=3, batch_first=True)
batch = torch.randn(2, 4, 2, requires_grad=True)
lengths = torch.tensor([4, 2])
packed = pack_padded_sequence(batch, lengths, batch_first=True)
out, (h, c) = lstm(packed)
padded, _ = pad_packed_sequence(out, batch_first=True)
loss = padded.sum() + h.pow(2).sum()
loss.backward()
print(batch.grad[1, 2:])  # zeros: the padding
print(lstm.weight_hh_l0.grad.shape)
