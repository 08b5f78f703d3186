"""minidist: distributed machine learning systems, built from scratch."""
