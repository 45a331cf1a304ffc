"""``specplan bench``: a plan against plain decoding, transformers' peers and the grid, with its report."""
