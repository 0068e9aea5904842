"""Write the generated blocks of docs/nccl-model.md: the error of the `nccl` model on the
shipped published set (what `gansim validate --published` prints, by system and size band),
and, given a folder of held-aside published files, the same for them point by point; and
README.md's two-line summary of both.

    python bench/nccl_model_doc.py                      # the shipped set only
    python bench/nccl_model_doc.py --heldout DIR        # and the held-aside files in DIR

Held-aside files are read and checked by the same loader as the shipped ones
(`load_published`: every field validated, the name the file's) and predicted the same way
(from their topology alone, their NCCL_P2P_LEVEL applied); tests/test_published.py holds them
to it without predicting them.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from gansim.docs import write_block
from gansim.prediction.published import (
    PublishedFile,
    BANDS,
    compare,
    error_table,
    load_published,
    summarize,
)

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "nccl-model.md"
README = ROOT / "README.md"


def fenced(body: str) -> str:
    """A block's text as the page shows it: a ```text fence around the table."""
    return "```text\n" + body.rstrip("\n") + "\n```"


def summary_line(label: str, files: list[PublishedFile], rows: list) -> str:
    """One README bullet: how many systems, then median and worst |error| per size band."""
    bands = []
    for name, low, high in BANDS:
        b = summarize(rows, low, high)
        if b.points:
            bands.append(f"{name}: median {b.median_abs_error:.1%}, worst {b.worst_abs_error:.1%} ({b.points} points)")
    return f"* {label} ({len(files)} systems): " + "; ".join(bands) + "."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--heldout", type=Path, help="a folder of held-aside published files")
    args = parser.parse_args()
    files = load_published()
    rows = [r for f in files for r in compare(f)]
    summary, _points = error_table(files, rows).split("\n\n")
    write_block(DOC, "nccl-model-published", fenced(summary))
    if args.heldout is not None:
        kept = load_published(directory=args.heldout)
        kept_rows = [r for f in kept for r in compare(f)]
        write_block(DOC, "nccl-model-heldout", fenced(error_table(kept, kept_rows)))
        write_block(README, "nccl-accuracy", "\n".join([
            summary_line("Shipped published systems (`validation/`)", files, rows),
            summary_line("Held aside while the model was built, predicted after each later change to it, never tuned to them", kept, kept_rows)]))
    print(f"wrote {DOC}")


if __name__ == "__main__":
    main()
