"""Train the course's MLP on the 8x8 digits, on one process: the baseline.

    python -m minidist.examples.mlp                   # Adam, 20 epochs, about a second
    python -m minidist.examples.mlp --optimizer sgd --lr 0.05 --hidden 128
    python -m minidist.examples.mlp --device cuda     # the same training on the GPU

Every parallel strategy of the course trains this same model on this same
data; their losses and accuracies are compared with the numbers printed here.
Inputs are standardised first (each pixel shifted and scaled by the mean and
standard deviation it has in the training set): on the same budget that takes
test accuracy from about 96% to about 97.5%. The loop is the four lines of
every training program:

    opt.zero_grad()                               # 1. forget old gradients
    loss = classification_loss(model, x, y)       # 2. forward: build the graph
    loss.backward()                               # 3. backward: fill p.grad
    opt.step()                                    # 4. update the weights

On a device (``--device cuda``, or ``strict``: the CI guard's stand-in) the
model and optimiser state live there; each batch is copied there once, as
the loop takes it, and only the loss (a number per step) and the
predictions come back to the host.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np
from tqdm import tqdm

from minidist import backend
from minidist.data import DataLoader, load_digits, standardize
from minidist.examples.options import add_device_option, choose_device, integer, number
from minidist.models.mlp import accuracy, build_mlp, classification_loss
from minidist.optim import SGD, Adam, Optimizer

OPTIMIZERS = ("adam", "sgd")


def make_optimizer(name: str, params: list, lr: float) -> Optimizer:
    """Adam, or SGD with momentum 0.9 (the two optimisers of Lecture 1)."""
    if name == "adam":
        return Adam(params, lr=lr)
    if name == "sgd":
        return SGD(params, lr=lr, momentum=0.9)
    raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {name!r}")


def train(epochs: int = 20, batch_size: int = 32, lr: float = 3e-3, hidden: int = 256,
          optimizer: str = "adam", seed: int = 0, progress: bool = True,
          dtype: Any = np.float32) -> dict[str, Any]:
    """Train MLP([64, hidden, 10]) on the digits, in ``dtype``, on the current device
    (``md.set_device``); returns the model, its losses and accuracy.

    Returns ``dict(model, losses, accuracy, seconds)``: ``losses`` holds the
    mean training loss of each epoch, ``accuracy`` the test-set accuracy at
    the end, ``seconds`` the wall time of training.
    """
    train_set, test_set = standardize(*load_digits(test_fraction=0.2, seed=seed))
    model = build_mlp((train_set.x.shape[1], hidden, train_set.num_classes), seed=seed,
                      dtype=dtype)
    opt = make_optimizer(optimizer, model.parameters(), lr)
    loader = DataLoader(train_set, batch_size=batch_size, shuffle=True, seed=seed)
    xp = backend.xp()

    losses: list[float] = []
    start = time.perf_counter()
    bar = tqdm(range(epochs), desc="epochs", disable=not progress)
    for epoch in bar:
        total, count = 0.0, 0
        for x, y in loader:
            x, y = xp.asarray(x, dtype=dtype), xp.asarray(y)  # the batch to the device, once
            opt.zero_grad()
            loss = classification_loss(model, x, y)
            loss.backward()
            opt.step()
            total += loss.item() * len(y)
            count += len(y)
        losses.append(total / count)
        bar.set_postfix(loss=f"{losses[-1]:.4f}")
        if progress:
            tqdm.write(f"epoch {epoch + 1:3d}  train loss {losses[-1]:.4f}")
    seconds = time.perf_counter() - start
    return dict(model=model, losses=losses, seconds=seconds,
                accuracy=accuracy(model, test_set.x, test_set.y))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=integer(1), default=20,
                        help="passes over the training set (default 20)")
    parser.add_argument("--batch-size", type=integer(1), default=32,
                        help="examples per step (default 32)")
    parser.add_argument("--lr", type=number(above=0), default=None,
                        help="learning rate (default: 3e-3 for adam, 0.05 for sgd)")
    parser.add_argument("--hidden", type=integer(1), default=256, help="width of the hidden layer")
    parser.add_argument("--optimizer", choices=OPTIMIZERS, default="adam",
                        help="default adam")
    parser.add_argument("--seed", type=integer(0), default=0,
                        help="seeds the weights and the shuffle (default 0)")
    add_device_option(parser)
    args = parser.parse_args(argv)
    device = choose_device(parser, args.device)
    lr = args.lr if args.lr is not None else (3e-3 if args.optimizer == "adam" else 0.05)
    result = train(epochs=args.epochs, batch_size=args.batch_size, lr=lr, hidden=args.hidden,
                   optimizer=args.optimizer, seed=args.seed)
    print(f"test accuracy {result['accuracy']:.2%} after {args.epochs} epochs on {device} "
          f"({result['seconds']:.1f} s of training)")
    return result


if __name__ == "__main__":
    main()
