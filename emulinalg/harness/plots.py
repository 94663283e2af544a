"""Plots of benchmark records (``python -m emulinalg bench --plot``).

Three panels, drawn with matplotlib's object API (no pyplot, so no global backend state):

``plane``
    Effective bits (``-log2`` of the maximum relative error against the exact product) against
    effective TFLOP/s, one point per method: the precision–throughput plane. Up and right is
    better; native is the black star.
``speedup``
    Time of native / time of the method against N, one line per method (above 1: faster than
    native).
``stages``
    Where the time goes: one bar per method, its length the time relative to native, split into
    scaling, slicing (residues or slices), integer products, reconstruction and the rest, in
    the proportions of the run recorded with ``emulinalg._timing``.

The plane and the stages use the largest size of the chosen shape; all panels use one φ (1 when
present, else the smallest measured), named in the titles.

Needs matplotlib (``pip install ".[bench]"``): without it, importing this module raises
:class:`ModuleNotFoundError` whose message is the one line that says so.
"""

from __future__ import annotations

from collections import defaultdict

from emulinalg import _extras

# before matplotlib's own imports: the hint, not a bare "No module named 'matplotlib'"
_extras.require("matplotlib", needed_by="emulinalg.harness.plots")

from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

PANELS = ("plane", "speedup", "stages")
_MARKERS = {"float64": "o", "float32": "s", "complex128": "D", "complex64": "^"}
_STAGE_COLORS = {
    "statistics": "#deebf7",
    "scaling": "#9ecae1",
    "slicing": "#3182bd",
    "products": "#fd8d3c",
    "reconstruction": "#31a354",
    "other": "#bdbdbd",
}
_EXACT_BITS = 64.0  # where an error-free result is drawn on the bits axis


def _group(r):
    return (r.get("family", r.get("backend")), r.get("shape", "square"), r["m"], r["n"], r["k"],
            r.get("batch", 1), r["dtype"], r["phi"])  # fmt: skip


def _usable(records):
    """Successful records, plus a native record per group for records that carry the native
    figures only in their ``native_*`` keys (the record format requires those; the bench harness
    also writes native rows of its own)."""
    out = [dict(r) for r in records if "error" not in r and r.get("seconds")]
    for r in out:
        r.setdefault("method", r.get("precision", "?"))
    have = {_group(r) for r in out if r["method"] == "native"}
    for r in list(out):
        if _group(r) not in have and r.get("native_tflops") and r.get("speedup"):
            have.add(_group(r))
            native = {"method": "native", "precision": "native", "scheme": "native"}
            native.update(tflops=r["native_tflops"], seconds=r["seconds"] * r["speedup"])
            native.update(bits_maxrel=r.get("native_bits_maxrel"), bits_cw=r.get("native_bits_cw"))
            out.append({**r, **native, "speedup": 1.0, "stages": None, "fallback": None})
    return out


def _choice(records):
    """(shape, phi) the panels show: square if measured, and phi 1 if measured."""
    shapes = {r.get("shape", "square") for r in records}
    shape = "square" if "square" in shapes else sorted(shapes)[0]
    phis = sorted({r["phi"] for r in records if r.get("shape", "square") == shape})
    phi = 1.0 if 1.0 in phis else phis[0]
    return shape, phi


class _Style:
    """One colour per method, one marker per dtype, the same in every panel."""

    def __init__(self, records):
        methods = []
        for r in records:
            if r["method"] != "native" and r["method"] not in methods:
                methods.append(r["method"])
        palette = [f"C{i}" for i in range(10)]
        self.color = {m: palette[i % 10] for i, m in enumerate(methods)}
        self.color["native"] = "black"
        self.families = sorted({r.get("family", r["backend"]) for r in records})
        self.dtypes = sorted({r["dtype"] for r in records}, key=list(_MARKERS).index)

    def label(self, r):
        text = r["method"]
        if len(self.dtypes) > 1:
            text += f", {r['dtype']}"
        if len(self.families) > 1:
            text = f"{r.get('family', r['backend'])}: {text}"
        return text

    def marker(self, r):
        return "*" if r["method"] == "native" else _MARKERS.get(r["dtype"], "o")

    def legend(self, ax, **kw):
        handles = [Line2D([], [], color=c, lw=2, label=m) for m, c in self.color.items()]
        handles += [
            Line2D([], [], ls="", marker=_MARKERS[d], color="gray", label=d) for d in self.dtypes
        ]
        ax.legend(handles=handles, fontsize="small", **kw)


def _largest(records, shape, phi):
    """Records of ``shape`` at ``phi`` and, per family, its largest size."""
    sel = [r for r in records if r.get("shape", "square") == shape and r["phi"] == phi]
    top = defaultdict(int)
    for r in sel:
        top[r.get("family", r["backend"])] = max(top[r.get("family", r["backend"])], r["m"])
    return [r for r in sel if r["m"] == top[r.get("family", r["backend"])]]


def _size_text(recs):
    sizes = sorted(
        {
            f"{r['m']}×{r['n']}×{r['k']}" + (f" ×{r['batch']}" if r.get("batch", 1) > 1 else "")
            for r in recs
        }
    )
    return ", ".join(sizes)


def draw_plane(ax, records, style, shape, phi):
    recs = [r for r in _largest(records, shape, phi) if r.get("tflops")]
    for r in recs:
        bits = r.get("bits_maxrel")
        bits = _EXACT_BITS if bits is None else max(bits, 0.0)
        native = r["method"] == "native"
        ax.scatter(
            bits,
            r["tflops"],
            s=160 if native else 50,
            marker=style.marker(r),
            color=style.color[r["method"]],
            edgecolors="black" if r.get("fallback") else "none",
            zorder=3 if native else 2,
        )
    ax.set_yscale("log")
    ax.set_xlabel("effective bits  (−log2 max relative error vs exact)")
    ax.set_ylabel("effective TFLOP/s  (2mnk / time)")
    ax.set_title(f"(a) precision–throughput, {shape} {_size_text(recs)}, φ={phi:g}", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    style.legend(ax, loc="best")


def draw_speedup(ax, records, style, shape, phi):
    series = defaultdict(list)
    for r in records:
        here = r.get("shape", "square") == shape and r["phi"] == phi
        if here and r["method"] != "native" and r.get("speedup"):
            series[(r.get("family", r["backend"]), r["method"], r["dtype"])].append(r)
    sizes = set()
    for (_fam, method, _dt), rs in sorted(series.items()):
        rs.sort(key=lambda r: r["size"] if "size" in r else r["m"])
        xs = [r.get("size", r["m"]) for r in rs]
        sizes.update(xs)
        ax.plot(
            xs,
            [r["speedup"] for r in rs],
            marker=style.marker(rs[0]),
            color=style.color[method],
            label=style.label(rs[0]),
        )
    ax.axhline(1.0, color="black", ls="--", lw=1)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    if sizes:
        ax.set_xticks(sorted(sizes), [str(s) for s in sorted(sizes)])
    ax.set_xlabel("N")
    ax.set_ylabel("speedup over native  (native time / time)")
    ax.set_title(f"(b) speedup over native vs N, {shape}, φ={phi:g}", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    if series:
        ax.legend(fontsize="small", loc="best")


def draw_stages(ax, records, style, shape, phi):
    recs = [
        r
        for r in _largest(records, shape, phi)
        if r["method"] != "native" and r.get("stages") and r.get("native_seconds")
    ]
    labels = []
    for i, r in enumerate(recs):
        st = r["stages"]
        staged = sum(st.values()) or 1.0
        scale = r["seconds"] / r["native_seconds"] / staged
        left = 0.0
        for name, color in _STAGE_COLORS.items():
            width = st.get(name, 0.0) * scale
            ax.barh(i, width, left=left, color=color)
            left += width
        ax.annotate(
            f" {left:.0f}×" if left >= 100 else f" {left:.3g}×",
            (left, i),
            va="center",
            fontsize="small",
        )
        labels.append(style.label(r))
    ax.axvline(1.0, color="black", ls="--", lw=1)
    ax.set_yticks(range(len(labels)), labels, fontsize="small")
    ax.invert_yaxis()
    ax.set_xlabel("time / native time  (split as recorded in one run)")
    ax.set_title(f"(c) where the time goes, {shape} {_size_text(recs)}, φ={phi:g}", fontsize=10)
    ax.legend(
        handles=[Patch(color=c, label=n) for n, c in _STAGE_COLORS.items()],
        fontsize="small",
        loc="lower right",
    )
    if not recs:
        ax.text(0.5, 0.5, "no stage timings in these records", ha="center", transform=ax.transAxes)


_DRAW = {"plane": draw_plane, "speedup": draw_speedup, "stages": draw_stages}


def _caption(records):
    devices = sorted({r.get("device", "?") for r in records})
    natives = sorted({r.get("native", "") for r in records} - {""})
    text = "; ".join(devices)
    if natives:
        text += "  —  native: " + "; ".join(natives)
    return text if len(text) < 200 else text[:197] + "..."


def plot(records, path: str) -> list[str]:
    """Draw the three panels of ``records`` into ``path``; returns the paths written.

    Parameters
    ----------
    records : list of dict
        Benchmark records (docs/performance.md, as written by ``python -m emulinalg bench``).
    path : str
        Output file; its extension picks the format (png, svg, pdf). A path containing
        ``{panel}`` gives one file per panel (``plane``, ``speedup``, ``stages``).

    Returns
    -------
    list of str

    Raises
    ------
    ValueError
        When no record has a time to plot.
    """
    recs = _usable(records)
    if not recs:
        raise ValueError("no successful measurements to plot")
    style = _Style(recs)
    shape, phi = _choice(recs)
    caption = _caption(recs)
    if "{panel}" in path:
        out = []
        for name in PANELS:
            fig = Figure(figsize=(7.5, 5.5), layout="constrained")
            _DRAW[name](fig.add_subplot(), recs, style, shape, phi)
            fig.suptitle(caption, fontsize=8)
            target = path.replace("{panel}", name)
            fig.savefig(target, dpi=120)
            out.append(target)
        return out
    n_methods = len({(r["method"], r["dtype"]) for r in recs})
    fig = Figure(figsize=(19, 5.5 + 0.12 * max(0, n_methods - 8)), layout="constrained")
    axes = fig.subplots(1, 3, width_ratios=[1, 1, 1.15])
    for ax, name in zip(axes, PANELS):
        _DRAW[name](ax, recs, style, shape, phi)
    fig.suptitle(caption, fontsize=9)
    fig.savefig(path, dpi=110)
    return [path]
