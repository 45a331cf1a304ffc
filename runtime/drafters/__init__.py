"""Drafters: propose tokens for a verifier (retrieval tables, layer-skip, separate models)."""
