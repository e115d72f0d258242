"""Parallax server: settings, SQL store, FastAPI app and command line."""

__version__ = "0.1.0"
