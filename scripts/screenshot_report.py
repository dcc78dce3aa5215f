"""Screenshots of report.html as a person sees it: the first screen, then one PNG per section (<h2>).

    python scripts/screenshot_report.py runs/<id>                 # -> runs/<id>/screenshots/*.png
    python scripts/screenshot_report.py runs/<id>/report.html --out /tmp/shots --open-details

A headless Chromium renders the report at --width pixels. first-screen.png is the window a reader sees on
opening the file (--width x --height); section-NN-<title>.png is each section alone, at its full height,
rendered with the report's own stylesheet (the page is cut at every <h2>; a section's figures and tables
are all in its piece). --open-details opens every collapsed <details> block, so that the tables inside are
checked too. Chromium: `apt-get install chromium` (Debian), or CHROMIUM=/path/to/chrome. Exit 2 when
there is no browser or no report.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "chrome", "headless_shell")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-quic"]
TALLEST = 16000  # pixels: a section taller than this is cut (the plots section is about 5,000)


def browser() -> str | None:
    """CHROMIUM, else the first Chromium-like browser on PATH."""
    found = os.environ.get("CHROMIUM") or next((shutil.which(b) for b in BROWSERS if shutil.which(b)), None)
    return found if found and Path(found).exists() else None


def split_sections(html: str, open_details: bool = False) -> list[tuple[str, str]]:
    """[(title, page)]: one page per <h2> section of report.html, each with the report's <head> (its
    stylesheet); the first also carries what comes before the first <h2> (the title, the warnings)."""
    head, body = html.split("<body>", 1)
    body = body.rsplit("</body>", 1)[0]
    if open_details:
        body = body.replace("<details>", "<details open>")
    pieces = re.split(r"(?=<h2[\s>])", body)
    preamble, sections = pieces[0], pieces[1:]
    out = []
    for i, piece in enumerate(sections):
        title = re.sub(r"<[^>]+>", "", re.match(r"<h2[^>]*>(.*?)</h2>", piece, re.S).group(1)).strip()
        out.append((title, f"{head}<body>\n{preamble if i == 0 else ''}{piece}\n</body></html>\n"))
    return out


def shoot(chrome: str, page: Path, png: Path, width: int, height: int, profile: Path) -> None:
    cmd = [chrome, *FLAGS, f"--user-data-dir={profile}", f"--screenshot={png}", f"--window-size={width},{height}",
           page.resolve().as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if not png.is_file():
        raise RuntimeError(f"{chrome}: no screenshot of {page.name}: {proc.stderr[-1500:]}")


def trim(png: Path, margin: int = 16) -> tuple[int, int]:
    """Cut the blank page below the content; -> (width, height) kept."""
    from PIL import Image, ImageChops

    img = Image.open(png).convert("RGB")
    box = ImageChops.difference(img, Image.new("RGB", img.size, (255, 255, 255))).getbbox()
    bottom = min(img.height, (box[3] if box else 0) + margin)
    img.crop((0, 0, img.width, max(bottom, 1))).save(png)
    return img.width, bottom


def slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:40] or "section"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("report", type=Path, help="report.html, or the run folder that holds it")
    ap.add_argument("--out", type=Path, help="folder for the PNGs (default: <run folder>/screenshots)")
    ap.add_argument("--width", type=int, default=1280, help="window width in pixels (default 1280)")
    ap.add_argument("--height", type=int, default=800, help="the first screen's height in pixels (default 800)")
    ap.add_argument("--open-details", action="store_true", help="open every collapsed <details> block")
    args = ap.parse_args(argv)
    report = args.report / "report.html" if args.report.is_dir() else args.report
    if not report.is_file():
        print(f"error: {report}: no report.html (rlbench report RUN_DIR writes one)", file=sys.stderr)
        return 2
    chrome = browser()
    if chrome is None:
        print("error: no headless browser: apt-get install chromium (Debian), or set CHROMIUM=/path/to/chrome",
              file=sys.stderr)
        return 2
    out = args.out or report.parent / "screenshots"
    out.mkdir(parents=True, exist_ok=True)
    html = report.read_text(encoding="utf-8")
    with tempfile.TemporaryDirectory(prefix="rlbench-shots-") as tmp:
        profile = Path(tmp) / "profile"
        first = out / "first-screen.png"
        shoot(chrome, report, first, args.width, args.height, profile)
        print(f"{first}  {args.width}x{args.height}  the first screen")
        for i, (title, page_html) in enumerate(split_sections(html, args.open_details), 1):
            page = Path(tmp) / f"section-{i:02d}.html"
            page.write_text(page_html, encoding="utf-8")
            png = out / f"section-{i:02d}-{slug(title)}.png"
            shoot(chrome, page, png, args.width, TALLEST, profile)
            w, h = trim(png)
            print(f"{png}  {w}x{h}  {title}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
