"""Models of the course, written once and trained by any parallel strategy."""

from minidist.models.glove import GloVe, Records, load_vectors, save_vectors
from minidist.models.glove_eval import analogy_accuracy, nearest_neighbours, similarity_spearman
from minidist.models.mlp import MLP, accuracy, build_mlp, classification_loss, predict

__all__ = [
    "MLP", "accuracy", "build_mlp", "classification_loss", "predict",
    "GloVe", "Records", "load_vectors", "save_vectors",
    "analogy_accuracy", "nearest_neighbours", "similarity_spearman",
]
