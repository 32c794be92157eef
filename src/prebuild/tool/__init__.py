"""The build tool: ``prebuild wheel`` (``builder``), ``inspect``, ``index``, ``install``,
``doctor`` and ``matrix``, and the ``prebuild`` command line (``cli``).

Separate from the kernel API (``prebuild.ops``, ``prebuild.runtime``): ``import prebuild``
and the ops never import this package.
"""
