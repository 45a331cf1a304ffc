"""Models: resolve a MODEL argument, load its weights (GGUF, Hugging Face directory), chat templates."""
