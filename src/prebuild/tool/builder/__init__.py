"""Ahead-of-time build: toolchain discovery, flags, ninja compilation, wheels.

Used by ``setup.py`` and ``prebuild wheel``; never imported by the runtime loader.
"""
