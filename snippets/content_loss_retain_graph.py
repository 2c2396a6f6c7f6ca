"""Style-transfer losses sharing features

In style transfer an image is passed through a feature extractor once, and two losses
are computed from those same features: a content loss and a style loss (a Gram matrix).
If each loss gets its own backward call, the first one needs retain_graph=True because
the second walks back through the same feature extractor.

Watch: the feature nodes (ReluBackward0, MmBackward0) keep their buffers after
content_loss.backward and free them during style_loss.backward; image.grad adds up both.
"""

import torch

torch.manual_seed(0)
image = torch.rand(2, 4, requires_grad=True)  # 2 channels, 4 pixels
filters = torch.randn(3, 2)  # a fixed one-layer "feature extractor"
content_target = torch.rand(3, 4)
style_target = torch.rand(3, 3)

features = torch.relu(filters @ image)  # computed once, used by both losses
content_loss = ((features - content_target) ** 2).mean()
gram = features @ features.T
style_loss = ((gram - style_target) ** 2).mean()

content_loss.backward(retain_graph=True)  # the style loss still needs `features`
print("image.grad after content loss:", image.grad)
style_loss.backward()
print("image.grad after style loss:", image.grad)
