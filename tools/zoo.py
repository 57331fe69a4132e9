"""Models built in code for tests, benches and demos (nothing is downloaded).

`build_resnet50_onnx(path)`: a ResNet-50 (bottleneck blocks 3-4-6-3, 224x224 input,
random fixed-seed weights, batch norm and the classifier included), defined in torch and
exported to ONNX (opset 17), input "image", output "logits".

`build_mobilenet_v2_onnx(path)`: a MobileNetV2 (width 1.0, inverted residual blocks with
depthwise 3x3 convs and ReLU6, 224x224 input, random fixed-seed weights and batch norm
statistics), the same way.
"""

from __future__ import annotations

import warnings
from pathlib import Path


def build_resnet50_onnx(path: Path) -> Path:
    import torch
    from torch import nn

    class Bottleneck(nn.Module):
        def __init__(self, cin: int, width: int, stride: int):
            super().__init__()
            cout = width * 4
            self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(width)
            self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(cout)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            y = torch.relu(self.bn1(self.conv1(x)))
            y = torch.relu(self.bn2(self.conv2(y)))
            y = self.bn3(self.conv3(y))
            return torch.relu(y + (x if self.down is None else self.down(x)))

    class ResNet50(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                                      nn.MaxPool2d(3, 2, 1))
            blocks, cin = [], 64
            for width, n, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
                for i in range(n):
                    blocks.append(Bottleneck(cin, width, stride if i == 0 else 1))
                    cin = width * 4
            self.blocks = nn.Sequential(*blocks)
            self.fc = nn.Linear(2048, 1000)

        def forward(self, x):
            x = self.blocks(self.stem(x))
            return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))

    torch.manual_seed(0)
    model = ResNet50().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.randn(1, 3, 224, 224),), str(path), dynamo=False,
                          input_names=["image"], output_names=["logits"], opset_version=17)
    return path


def build_mobilenet_v2_onnx(path: Path) -> Path:
    import torch
    from torch import nn

    def conv_bn(cin: int, cout: int, k: int, stride: int, groups: int = 1, relu6: bool = True) -> list[nn.Module]:
        layers: list[nn.Module] = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False),
                                   nn.BatchNorm2d(cout)]
        return layers + [nn.ReLU6()] if relu6 else layers

    class InvertedResidual(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int, expand: int):
            super().__init__()
            hidden = cin * expand
            self.body = nn.Sequential(*(conv_bn(cin, hidden, 1, 1) if expand != 1 else []),
                                      *conv_bn(hidden, hidden, 3, stride, groups=hidden),  # depthwise
                                      *conv_bn(hidden, cout, 1, 1, relu6=False))
            self.residual = stride == 1 and cin == cout

        def forward(self, x):
            return x + self.body(x) if self.residual else self.body(x)

    torch.manual_seed(0)  # before the layers: their initial weights are the model's weights
    layers, cin = conv_bn(3, 32, 3, 2), 32
    # (expansion, output channels, blocks, first stride): the paper's table 2
    for expand, cout, n, stride in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                                    (6, 160, 3, 2), (6, 320, 1, 1)):
        for i in range(n):
            layers.append(InvertedResidual(cin, cout, stride if i == 0 else 1, expand))
            cin = cout
    layers += conv_bn(cin, 1280, 1, 1) + [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(1280, 1000)]
    model = nn.Sequential(*layers).eval()
    for m in model.modules():  # batch norm statistics a trained model would have, not the identity
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.normal_(0, 0.1)
            m.running_var.uniform_(0.5, 1.5)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.normal_(0, 0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.randn(1, 3, 224, 224),), str(path), dynamo=False,
                          input_names=["image"], output_names=["logits"], opset_version=17)
    return path
