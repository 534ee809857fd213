"""A dependency-free SVG bar chart: samples/s per system and replica count, one panel per model."""
from xml.sax.saxutils import escape

COLORS = {"Lockstep": "#1f77b4", "PyTorch": "#ff7f0e"}
BAR, GAP, LABEL_W, PLOT_W, PANEL_GAP = 18, 4, 360, 420, 36


def panel(rows, y0, title):
    top = max(r["samples_per_s"] for r in rows)
    parts = ['<text x="4" y="%d" font-weight="bold">%s</text>' % (y0 + 14, escape(title))]
    y = y0 + 22
    for r in rows:
        w = PLOT_W * r["samples_per_s"] / top
        label = r["name"]
        parts.append('<text x="%d" y="%d" text-anchor="end">%s</text>' % (
            LABEL_W - 6, y + BAR - 5, escape(label)))
        parts.append('<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>' % (
            LABEL_W, y, w, BAR, COLORS.get(r["system"], "#888")))
        parts.append('<text x="%.1f" y="%d">%s</text>' % (
            LABEL_W + w + 4, y + BAR - 5, "{:,.0f}".format(r["samples_per_s"])))
        y += BAR + GAP
    return parts, y


def write_svg(rows, path):
    models = []
    for r in rows:
        if r["model"] not in models:
            models.append(r["model"])
    body, y = [], 0
    for m in models:
        parts, y = panel([r for r in rows if r["model"] == m], y,
                         "%s model: training samples/s (steady state, median)" % m)
        body += parts
        y += PANEL_GAP
    width = LABEL_W + PLOT_W + 90
    svg = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
           'font-family="sans-serif" font-size="12">' % (width, y),
           '<rect width="100%" height="100%" fill="white"/>'] + body + ["</svg>"]
    with open(path, "w") as f:
        f.write("\n".join(svg) + "\n")
