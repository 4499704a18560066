"""``python -m es_rag.cli``: the same command as ``es-rag``."""

from es_rag.cli import main

main()
