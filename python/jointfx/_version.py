"""The jointfx version: pyproject.toml reads it from here (scikit-build-core's regex provider)."""

__version__ = "0.1.0"
