"""Sub-commands of ``xmtc`` that live outside cli.py: each module has ``add_parser(sub, common)`` and ``run(args)``."""
