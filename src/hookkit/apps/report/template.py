"""The report's HTML skeleton and inline CSS: one file, no scripts, nothing fetched from the network."""

CSS = """
:root { --fg: #1d2430; --muted: #5b6573; --line: #d9dee5; --accent: #3b6fd8; --bg: #fbfcfd; }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.5 -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif;
       color: var(--fg); background: var(--bg); }
header { padding: 24px 40px 12px; border-bottom: 1px solid var(--line); background: #fff; }
header h1 { margin: 0 0 4px; font-size: 24px; }
header .meta { color: var(--muted); font-size: 14px; }
header .meta b { color: var(--fg); }
nav { padding: 8px 40px; border-bottom: 1px solid var(--line); background: #fff; position: sticky; top: 0; }
nav a { color: var(--accent); text-decoration: none; margin-right: 18px; font-size: 14px; }
main { padding: 8px 40px 40px; max-width: 1400px; }
section { margin: 28px 0; }
section h2 { font-size: 19px; border-bottom: 2px solid var(--accent); padding-bottom: 4px; }
section p.intro { color: var(--muted); margin-top: 0; }
figure { margin: 12px 0 20px; }
figure img { max-width: 100%; height: auto; border: 1px solid var(--line); background: #fff; }
figcaption { color: var(--muted); font-size: 13px; }
table { border-collapse: collapse; font-size: 13px; font-variant-numeric: tabular-nums; }
th, td { padding: 4px 12px; border-bottom: 1px solid var(--line); text-align: left; }
th { background: #eef1f5; }
td.num { text-align: right; white-space: nowrap; }
table.summary td:first-child { white-space: nowrap; }
tr.failed td { color: #b3261e; font-weight: 600; }
tr.static td { color: var(--muted); }
ul.totals { list-style: none; padding: 0; margin: 10px 0 0; color: var(--muted); font-size: 13px; }
ul.totals li { margin: 1px 0; }
figure.wide { width: 100%; }
figure.wide img { width: 100%; }
details { margin: 8px 0 20px; }
details summary { cursor: pointer; color: var(--accent); font-size: 14px; margin-bottom: 10px; }
.grid { display: flex; flex-wrap: wrap; gap: 16px; }
.grid figure { margin: 0; }
footer { color: var(--muted); font-size: 12px; padding: 16px 40px; border-top: 1px solid var(--line); }
"""

PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>{css}</style>
</head>
<body>
<header><h1>{title}</h1><div class="meta">{meta}</div></header>
<nav>{nav}</nav>
<main>
{sections}
</main>
<footer>Written by hookkit {version}. Self-contained: figures are embedded; open it from disk.</footer>
</body>
</html>
"""
