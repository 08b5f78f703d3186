"""Models of the course: the MLP here; GloVe in its own package, ``minidist.glove``.

``minidist.models.glove`` and ``minidist.models.glove_eval``, GloVe's old
module paths, are kept as names of ``minidist.glove`` and its ``evaluate``.
"""

import sys

from minidist import glove
from minidist.glove import (
    GloVe,
    Records,
    analogy_accuracy,
    load_vectors,
    nearest_neighbours,
    save_vectors,
    similarity_spearman,
)
from minidist.glove import evaluate as glove_eval
from minidist.models.mlp import MLP, accuracy, build_mlp, classification_loss, predict

sys.modules[f"{__name__}.glove"] = glove
sys.modules[f"{__name__}.glove_eval"] = glove_eval

__all__ = [
    "MLP", "accuracy", "build_mlp", "classification_loss", "predict",
    "glove", "glove_eval", "GloVe", "Records", "load_vectors", "save_vectors",
    "analogy_accuracy", "nearest_neighbours", "similarity_spearman",
]
