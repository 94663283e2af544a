"""Benchmark records (JSON lines, docs/performance.md): reading them back and their tables, one
row per measurement (``table``) or effective bits per method and φ (``bits_table``)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable


def load_records(paths: Iterable[str]) -> list[dict]:
    """Records from JSON-lines files (blank lines skipped).

    Raises
    ------
    ValueError
        A line that is not a JSON object (the message names the file and line).
    """
    out = []
    for path in paths:
        with open(path, encoding="utf-8") as fh:
            for i, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path}:{i}: not JSON ({exc})") from None
                if not isinstance(rec, dict):
                    raise ValueError(f"{path}:{i}: not a JSON object")
                out.append(rec)
    return out


def _fmt(x, spec):
    return "-" if x is None else format(x, spec)


def _bits(x):
    return "exact" if x is None else f"{x:.1f}"


def table(records: list[dict], markdown: bool = False) -> str:
    """The records as a text (or Markdown) table: one row per measurement."""
    head = (
        "backend",
        "shape",
        "m×n×k",
        "batch",
        "dtype",
        "φ",
        "method",
        "scheme ran",
        "bits maxrel/cw",
        "native bits",
        "TFLOP/s",
        "× native",
    )
    rows = []
    for r in records:
        dims = f"{r['m']}×{r['n']}×{r['k']}"
        cells = [
            r.get("backend", "?"),
            r.get("shape", "?"),
            dims,
            str(r.get("batch", 1)),
            r["dtype"],
            f"{r['phi']:g}",
            r.get("method", r.get("precision", "?")),
        ]
        native = f"{_bits(r.get('native_bits_maxrel'))}/{_bits(r.get('native_bits_cw'))}"
        if "error" in r:
            rows.append(cells + ["ERROR " + r["error"][:50], "", native, "", ""])
            continue
        scheme = str(r.get("scheme", "?"))
        if r.get("fallback"):
            scheme += " (fallback)"
        rows.append(
            cells
            + [
                scheme,
                f"{_bits(r.get('bits_maxrel'))}/{_bits(r.get('bits_cw'))}",
                native,
                _fmt(r.get("tflops"), ".3g"),
                _fmt(r.get("speedup"), ".3g"),
            ]
        )
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
        return "\n".join(lines)
    widths = [max([len(h)] + [len(row[i]) for row in rows]) for i, h in enumerate(head)]

    def line(cells):
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()

    return "\n".join([line(head), line(["-" * w for w in widths])] + [line(r) for r in rows])


def _schemes_text(recs: list[dict]) -> str:
    """The schemes of records in order (φ), numbers that differ joined with '/'."""
    texts = [str(r.get("scheme", "?")) for r in recs]
    shapes = {re.sub(r"\d+", "#", t) for t in texts}
    if len(set(texts)) == 1:
        out = texts[0]
    elif len(shapes) == 1:
        numbers = zip(*(re.findall(r"\d+", t) for t in texts))
        parts = iter(["/".join(col) if len(set(col)) > 1 else col[0] for col in numbers])
        out = re.sub(r"\d+", lambda _: next(parts), texts[0])
    else:
        out = " / ".join(texts)
    native = [f"{r['native_entries']} at φ={r['phi']:g}" for r in recs if r.get("native_entries")]
    return out + (f"; native entries: {', '.join(native)}" if native else "")


def bits_table(records: list[dict], markdown: bool = True) -> str:
    """Effective bits per method (rows, native first) and φ (columns), per dtype and size.

    Each cell is ``bits_maxrel / bits_cw`` of the measurement ("exact" for an error of 0); the
    last column gives the scheme that ran, with the counts per φ where a level chose different
    ones (``OzakiII(moduli=17/17/19, ...)``), and the entries computed natively.
    """
    groups: dict[tuple, dict] = {}
    for r in records:
        if "error" in r:
            continue
        dims = f"{r['m']}×{r['n']}×{r['k']}"
        key = (r.get("family", r.get("backend")), r.get("shape"), dims, r["dtype"])
        rows = groups.setdefault(key, {})
        rows.setdefault(r["method"], {})[r["phi"]] = r
    out = []
    for (family, shape, dims, dtype), rows in groups.items():
        phis = sorted({phi for cells in rows.values() for phi in cells})
        head = ["method", *(f"φ={p:g}" for p in phis), "scheme"]
        body = []
        for method in sorted(rows, key=lambda m: (m != "native", list(rows).index(m))):
            cells = rows[method]
            bits = [
                f"{_bits(cells[p].get('bits_maxrel'))} / {_bits(cells[p].get('bits_cw'))}"
                if p in cells
                else ""
                for p in phis
            ]
            scheme = (
                "" if method == "native" else _schemes_text([cells[p] for p in phis if p in cells])
            )
            body.append([method, *bits, scheme])
        title = f"{family}, {shape} {dims}, {dtype} (bits maxrel / componentwise)"
        if markdown:
            lines = [f"**{title}**", "", "| " + " | ".join(head) + " |"]
            lines += ["|" + "---|" * len(head)] + ["| " + " | ".join(b) + " |" for b in body]
        else:
            widths = [max(len(x[i]) for x in [head, *body]) for i in range(len(head))]
            lines = [title] + [
                "  ".join(c.ljust(w) for c, w in zip(x, widths)) for x in [head, *body]
            ]
        out.append("\n".join(lines))
    return "\n\n".join(out)
