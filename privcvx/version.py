"""The library's version (``pc.__version__``), in a module of its own that imports nothing: the checkpoint header
records it (`privcvx.runtime.checkpoint.fingerprint`) without loading the package facade from inside the runtime."""

__version__ = "0.1.0"
