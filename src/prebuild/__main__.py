"""``python -m prebuild``: the ``prebuild`` command (the tool, ``prebuild.tool.cli``)."""

from prebuild.tool.cli import main

main()
