#!/usr/bin/env python3
"""A flame graph (SVG) from `perf script` output; Debian ships no flame-graph tool.

    perf record -F 499 -g -p PID -- sleep 10
    perf script | scripts/perf/flamegraph.py --title "relay at catch-up" > docs/perf/x.svg

Each sample's stack is folded root first (the process name at the bottom), identical stacks are
counted, and every frame becomes a box as wide as its share of the samples; hover a box for its
name, samples and percentage. `--name PID=LABEL` names a process's root box (e.g. which postgres
is the relay's session and which its walsender, in a system-wide `perf record -a`); other
processes keep their command name. `--folded` prints the folded stacks instead ("a;b;c count"), and
`--min-percent` leaves out boxes narrower than that (default 0.1).
"""
import argparse
import collections
import html
import re
import sys
import zlib


def read_samples(lines, names):
    """Yields (process, [frames leaf first]) for each sample of `perf script`."""
    header, frames = None, []
    for line in lines:
        line = line.rstrip("\n")
        if not line.strip():
            if header is not None:
                yield header, frames
            header, frames = None, []
        elif header is None:
            fields = line.split()
            header = fields[0] if fields else "?"
            pid = fields[1].split("/")[0] if len(fields) > 1 else ""
            header = names.get(pid, header)
        else:
            parts = line.strip().split(None, 1)
            sym = parts[1] if len(parts) > 1 else parts[0]
            sym = re.sub(r"\+0x[0-9a-f]+", "", sym)  # offsets within a function
            if sym.startswith("[unknown]"):
                dso = re.search(r"\(([^)]*)\)\s*$", sym)
                sym = f"[{dso.group(1).rsplit('/', 1)[-1]}]" if dso else "[unknown]"
            else:
                sym = re.sub(r"\s+\([^)]*\)\s*$", "", sym)  # the DSO
            frames.append(sym)
    if header is not None:
        yield header, frames


def fold(lines, names):
    counts = collections.Counter()
    for comm, frames in read_samples(lines, names):
        counts[";".join([comm] + list(reversed(frames)))] += 1
    return counts


def colour(name):
    h = zlib.crc32(name.encode())
    if name.startswith("[") or "kernel" in name:
        return f"rgb({200 + h % 55},{80 + h % 60},{60 + h % 40})"
    return f"rgb({220 + h % 35},{110 + (h >> 8) % 110},{40 + (h >> 16) % 50})"


def render(counts, title, min_percent, width=1200, row=16):
    total = sum(counts.values())
    tree = {}
    for stack, n in counts.items():
        node = tree
        for frame in stack.split(";"):
            entry = node.setdefault(frame, [0, {}])
            entry[0] += n
            node = entry[1]
    boxes, depth_max = [], 0

    def walk(node, x, depth):
        nonlocal depth_max
        for name, (n, children) in sorted(node.items()):
            w = n / total * (width - 20)
            if 100.0 * n / total >= min_percent:
                boxes.append((x, depth, w, name, n))
                depth_max = max(depth_max, depth)
                walk(children, x, depth + 1)
            x += w

    walk(tree, 10.0, 0)
    height = (depth_max + 1) * row + 60
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="monospace" font-size="11">',
           f'<rect width="100%" height="100%" fill="#f8f8f0"/>',
           f'<text x="{width / 2}" y="20" text-anchor="middle" font-size="15">'
           f'{html.escape(title)} ({total} samples)</text>']
    for x, depth, w, name, n in boxes:
        y = height - 20 - (depth + 1) * row
        label = html.escape(name)
        pct = 100.0 * n / total
        out.append(f'<g><title>{label} ({n} samples, {pct:.2f}%)</title>'
                   f'<rect x="{x:.1f}" y="{y}" width="{max(w - 0.5, 0.1):.1f}" height="{row - 1}" '
                   f'fill="{colour(name)}" rx="1"/>')
        chars = int(w / 6.6)
        if chars >= 4:
            text = name if len(name) <= chars else name[: chars - 2] + ".."
            out.append(f'<text x="{x + 2:.1f}" y="{y + row - 4}">{html.escape(text)}</text>')
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--title", default="perf")
    parser.add_argument("--folded", action="store_true", help="print folded stacks, no SVG")
    parser.add_argument("--min-percent", type=float, default=0.1)
    parser.add_argument("--name", action="append", default=[], metavar="PID=LABEL")
    args = parser.parse_args()
    names = dict(item.split("=", 1) for item in args.name)
    counts = fold(sys.stdin, names)
    if not counts:
        sys.exit("flamegraph.py: no samples on stdin (perf script output expected)")
    if args.folded:
        for stack, n in counts.most_common():
            print(f"{stack} {n}")
    else:
        print(render(counts, args.title, args.min_percent))


if __name__ == "__main__":
    main()
