"""TinyCNN in PyTorch: three 3x3 convolutions with BatchNorm and ReLU, global average pooling
and a linear classifier. Any ``torch.nn.Module`` that maps (batch, 3, H, W) images to logits can
stand here; fwbench counts its parameters and FLOPs itself."""

from torch import nn

WIDTHS = (16, 32, 64)


def _block(cin: int, cout: int, stride: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    )


class TinyCNN(nn.Module):
    def __init__(self, num_classes: int = 10):
        super().__init__()
        cins = (3, *WIDTHS[:-1])
        self.features = nn.Sequential(
            *(
                _block(cin, cout, 1 if i == 0 else 2)
                for i, (cin, cout) in enumerate(zip(cins, WIDTHS, strict=True))
            )
        )
        self.classifier = nn.Linear(WIDTHS[-1], num_classes)

    def forward(self, x):
        return self.classifier(self.features(x).mean(dim=(2, 3)))


def build(num_classes: int = 10) -> TinyCNN:
    """The builder a declaration names: fwbench calls it with ``num_classes`` (and seeds torch's
    random initialisation itself)."""
    return TinyCNN(num_classes)
