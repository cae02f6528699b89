"""Compiled hot path. Imports nothing from the rest of wirearrow and nothing from pyarrow:
it executes flat integer tables and hands back raw buffers (see tables.pxd for the layout)."""
