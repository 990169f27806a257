"""A made-up training script whose lines the report tests quote."""
import torch


def main():
    x = torch.empty(1024, device="cuda")
    side = torch.cuda.Stream()
    x.fill_(1.0)
    with torch.cuda.stream(side):
        y = x * 2
    del x
    return y


def step(x, side):
    x.add_(1)
    with torch.cuda.stream(side):
        z = x.sum()
    return z
