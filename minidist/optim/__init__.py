"""Optimisers and learning-rate schedules (Lecture 1).

    opt = md.optim.Adam(model.parameters(), lr=1e-3)
    opt.zero_grad(); loss.backward(); opt.step()

``optimizer.py`` has the loop every optimiser shares; one file per method
(``sgd.py``, ``adam.py``, ``adagrad.py``, ``lookahead.py``) gives its update
rule with the formula (``adagrad_rows``, AdaGrad's, also updates the rows a GloVe
batch touched; ``glove_c_update`` is glove.c's rule for one weight, which every GloVe
trainer runs); ``schedules.py`` changes ``lr`` over time.
"""

from minidist.optim import schedules
from minidist.optim.adagrad import AdaGrad, adagrad_rows, glove_c_update
from minidist.optim.adam import Adam
from minidist.optim.lookahead import Lookahead
from minidist.optim.optimizer import Optimizer
from minidist.optim.schedules import LRScheduler
from minidist.optim.sgd import SGD

__all__ = [
    "SGD", "AdaGrad", "adagrad_rows", "glove_c_update", "Adam", "LRScheduler", "Lookahead",
    "Optimizer",
    "schedules",
]
