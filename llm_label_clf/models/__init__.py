"""Where a model comes from: the built-in model shipped as a GGUF in a PyPI
package and converted once into a cache (``builtin``), and checks that a
model name can be loaded before vLLM starts (``source``)."""
