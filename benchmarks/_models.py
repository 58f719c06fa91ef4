"""The small ResNet-style CNN shared by the benchmarks (torchvision's BasicBlock layout, width 32)."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import torch
from torch import nn


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)  # called twice per block, as in torchvision
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        idt = x if self.down is None else self.down(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + idt)


class SmallResNet(nn.Module):
    def __init__(self, width: int = 32, classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True))
        chans = [width, width * 2, width * 4, width * 8]
        stages, cin = [], width
        for i, c in enumerate(chans):
            stages.append(nn.Sequential(BasicBlock(cin, c, 1 if i == 0 else 2), BasicBlock(c, c, 1)))
            cin = c
        self.stages = nn.Sequential(*stages)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.flatten(self.pool(self.stages(self.stem(x)))))


def gpt2_training_step() -> tuple[nn.Module, Callable[[], None]]:
    """GPT-2 4x128 (random weights), batch 4x64 tokens, one AdamW step per call: the statistics
    benchmarks' workload (issue 19)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=4, n_embd=128, n_head=4)).train()
    # A new batch each step, as in training: hundreds of steps on one batch make the model
    # memorize it, its logits collapse below histc's range, and histc's skip branch gets cheap.
    batches = itertools.cycle([torch.randint(0, model.config.vocab_size, (4, 64)) for _ in range(64)])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step() -> None:
        ids = next(batches)
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad()

    return model, step
