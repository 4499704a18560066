"""The ``es-rag`` command.

Contracts other tools rely on: ``search --json`` prints one JSON object; ``ingest`` prints
one line per failed input and exits non-zero if any failed, after ingesting the others;
every error is one line on stderr with a non-zero exit code.

The global flags (``--es-url``, ``--index``…) are kept on Typer's context and read by each
command through ``settings_of``: no module-level state.
"""

from __future__ import annotations

import logging
import os
import sys
import types
from typing import Annotated, Any

import typer

from es_rag.cli import (
    dashboards,
    documents,
    evaluating,
    migrating,
    querying,
    queueing,
    serving,
)

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Permission-aware hybrid retrieval for RAG on Elasticsearch.",
    pretty_exceptions_enable=False,
)


@app.callback()
def main_options(
    ctx: typer.Context,
    es_url: Annotated[
        str | None, typer.Option(help="Elasticsearch or OpenSearch URL (ES_RAG_ES_URL)")
    ] = None,
    engine: Annotated[
        str | None, typer.Option(help="auto | elasticsearch | opensearch (ES_RAG_ENGINE)")
    ] = None,
    index: Annotated[str | None, typer.Option(help="index alias (ES_RAG_INDEX)")] = None,
    embedding_backend: Annotated[
        str | None, typer.Option(help="sentence-transformers | flag | openai")
    ] = None,
    embedding_model: Annotated[str | None, typer.Option(help="model name or path")] = None,
    embedding_url: Annotated[str | None, typer.Option(help="OpenAI-compatible server URL")] = None,
    device: Annotated[str | None, typer.Option(help="cpu, cuda, cuda:1, mps")] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="log progress details")] = False,
) -> None:
    """Settings come from ES_RAG_* environment variables; these flags override them."""
    ctx.obj = {
        "es_url": es_url,
        "engine": engine,
        "index": index,
        "embedding_backend": embedding_backend,
        "embedding_model": embedding_model,
        "embedding_url": embedding_url,
        "device": device,
    }
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, stream=sys.stderr)
    if not verbose:
        # The transport logs every failed attempt with a traceback; es-rag reports the
        # outcome itself, as one line.
        logging.getLogger("elastic_transport").setLevel(logging.ERROR)
        logging.getLogger("opensearch").setLevel(logging.CRITICAL)


app.command()(documents.init)
app.command()(documents.ingest)
app.command()(queueing.worker)
app.command()(queueing.status)
app.command()(queueing.requeue)
app.command()(querying.search)
app.command()(querying.context)
app.command()(querying.calibrate)
app.command("eval")(evaluating.eval_)
app.command()(documents.delete)
app.command("upgrade-index")(documents.upgrade_index)
app.command()(documents.info)
app.command()(migrating.migrate)
app.command()(serving.serve)
app.add_typer(serving.keys_app, name="keys")
app.add_typer(dashboards.dashboards_app, name="dashboards")


# elastic_transport imports at once every HTTP backend it can find, but the CLI's requests
# go through its synchronous urllib3 node: the asynchronous (aiohttp) and alternative
# (requests, httpx) nodes and the Arrow serializer (pyarrow, which loads numpy) only cost
# start-up, a quarter of a second of every command and most of a re-ingest that finds
# nothing changed. Those imports are optional there (an ImportError turns them off), and a
# None in sys.modules is how Python makes one fail; the entries go again straight after,
# so a later import (Unstructured uses requests, the remote embedder httpx) loads the real
# package. Only the CLI does this: a program that imports es_rag keeps every transport.
#
# elasticsearch's package also imports its asyncio client (a second copy of the whole API,
# a third of the package's import time), which no CLI command uses: while the package
# imports, a placeholder stands in for that module, and afterwards
# ``elasticsearch.AsyncElasticsearch`` imports the real one at first use.
_NOT_FOR_THE_CLI = ("aiohttp", "httpx", "requests", "pyarrow")
_ASYNC_CLIENT = "elasticsearch._async.client"


def _import_sync_transport() -> None:
    if "elastic_transport" in sys.modules:
        return
    absent = [name for name in _NOT_FOR_THE_CLI if name not in sys.modules]
    for name in absent:
        sys.modules[name] = None  # type: ignore[assignment]
    placeholder = types.ModuleType(_ASYNC_CLIENT)
    placeholder.AsyncElasticsearch = None  # type: ignore[attr-defined]
    sys.modules[_ASYNC_CLIENT] = placeholder
    whole = False
    try:
        import elasticsearch
    except ImportError:  # a client whose package needs more of that module
        whole = True
    finally:
        for name in absent:
            del sys.modules[name]
        if sys.modules.get(_ASYNC_CLIENT) is placeholder:
            del sys.modules[_ASYNC_CLIENT]
    if whole:
        import elasticsearch  # as any program imports it
    elif vars(elasticsearch).get("AsyncElasticsearch") is None:
        del elasticsearch.AsyncElasticsearch
        setattr(elasticsearch, "__getattr__", _async_client_at_first_use)  # noqa: B010


def _async_client_at_first_use(name: str) -> Any:
    if name != "AsyncElasticsearch":
        raise AttributeError(f"module 'elasticsearch' has no attribute {name!r}")
    import elasticsearch
    from elasticsearch._async.client import AsyncElasticsearch

    elasticsearch.AsyncElasticsearch = AsyncElasticsearch  # type: ignore[misc]
    return AsyncElasticsearch


def main() -> None:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    _import_sync_transport()
    app()
