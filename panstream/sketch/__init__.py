"""The sketch family's parts (Sketch-Flip-Merge): hashes, and later the grid, estimator and format."""
