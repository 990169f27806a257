"""Stand-in training script: the report tests point synthetic stacks at its lines."""
import torch


def seed_example():
    x = torch.empty(1024, device="cuda")
    x.fill_(1.0)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = x * 2
    del x
    return y


def data_race():
    x = torch.empty(1024, device="cuda")
    side = torch.cuda.Stream()
    x.fill_(1.0)
    with torch.cuda.stream(side):
        y = x.sum()
    return y


def view_race():
    x = torch.empty(1024, device="cuda")
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        x[256:].zero_()
    return x.sum()


def reuse_race():
    side = torch.cuda.Stream()
    x = torch.empty(1024, device="cuda")
    x.fill_(0.0)
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = x * 2
    del x
    z = torch.empty(1024, device="cuda")
    z.fill_(1.0)
    return y, z


def correct():
    x = torch.empty(1024, device="cuda")
    x.fill_(1.0)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = x * 2
    x.record_stream(side)
    del x
    torch.cuda.synchronize()
    return y


def main():
    for step in range(3):
        seed_example()
        data_race()
        view_race()
        reuse_race()
        correct()


if __name__ == "__main__":
    main()
