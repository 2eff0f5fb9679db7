"""Pages as a person sees them: Debian's headless Chromium driven through its chromedriver (selenium), no
browser download. What a test reads back comes from the browser's layout (bounding boxes, what is painted on
top at a point, the page's scroll width), not from the HTML as text."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
PAGE_LOAD_S = 30
START_TRIES = 3
DESKTOP, PHONE = 1200, 390
_FLAGS = (
    "--headless=new",
    "--no-sandbox",  # root in CI
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--host-resolver-rules=MAP * ~NOTFOUND",  # no name resolves: offline, as on a locked-down cluster
)

# For every <svg>: its marks (dots, lines, bars and bands) with a box a person can see, and, per kind, at how many
# of their centres the browser paints a mark of that kind (so none is hidden under something else or clipped).
_MARKS_JS = """
return [...document.querySelectorAll(arguments[0])].map(svg => {
  const seen = {circle: 0, polyline: 0, rect: 0, onTop: {circle: 0, rect: 0}, titles: []};
  for (const el of svg.querySelectorAll('circle, polyline, rect')) {
    const box = el.getBoundingClientRect(), style = getComputedStyle(el);
    const drawn = el.tagName === 'polyline' ? box.width > 0 || box.height > 0 : box.width > 0 && box.height > 0;
    if (!drawn || style.visibility === 'hidden' || style.display === 'none' || +style.opacity === 0) continue;
    seen[el.tagName] += 1;
    const title = el.querySelector('title');
    if (title) seen.titles.push(title.textContent);
    if (el.tagName !== 'polyline') {
      el.scrollIntoView({block: 'center', inline: 'center'});
      const b = el.getBoundingClientRect();
      const hit = document.elementFromPoint(b.left + b.width / 2, b.top + b.height / 2);
      if (hit && svg.contains(hit) && hit.tagName === el.tagName) seen.onTop[el.tagName] += 1;
    }
  }
  const box = svg.getBoundingClientRect();
  seen.width = box.width;
  return seen;
});
"""


def have_chromium() -> str | None:
    """Why no browser test can run here, or None (scripts/setup.sh installs both)."""
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if shutil.which(p) is None]
    return (
        f"{' and '.join(missing)} missing: run scripts/setup.sh (apt-get install chromium chromium-driver)"
        if missing
        else None
    )


@contextmanager
def chromium(width: int = DESKTOP, height: int = 900) -> Iterator[Any]:
    """A headless Chromium window `width` px wide; closed (with its chromedriver) on exit."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (*_FLAGS, f"--window-size={width},{height}"):
        options.add_argument(arg)
    driver = _started(lambda: webdriver.Chrome(service=Service(CHROMEDRIVER), options=options))
    driver.set_page_load_timeout(PAGE_LOAD_S)
    try:
        yield driver
    finally:
        driver.quit()


def _started(start: Callable[[], Any]) -> Any:
    """`start()`, tried up to START_TRIES times: selenium hands chromedriver a port it probed free, which
    another process on a busy machine can take first (chromedriver then exits with status 1)."""
    from selenium.common.exceptions import WebDriverException

    for _ in range(START_TRIES - 1):
        with contextlib.suppress(WebDriverException):
            return start()
    return start()


def open_page(driver: Any, path: str | os.PathLike[str], width: int) -> None:
    """Show the local file at `path` in a window `width` px wide."""
    driver.set_window_size(width, 900)
    driver.get(Path(path).resolve().as_uri())


def overflow(driver: Any) -> tuple[int, int]:
    """(the page's scroll width, the window's inner width): the page fits when the first is not larger."""
    return tuple(driver.execute_script("return [document.documentElement.scrollWidth, window.innerWidth]"))


def chart_marks(driver: Any, charts: str = "svg") -> list[dict[str, Any]]:
    """Per chart (each <svg> matching the CSS selector `charts`): its visible circles, polylines and rects, how
    many of the circles and rects have a mark of their kind painted at their centre, their tooltips and the
    chart's width."""
    return driver.execute_script(_MARKS_JS, charts)


def visible_text(driver: Any, css: str) -> str:
    """The rendered text of the first element matching `css` ("" when there is none or it is hidden)."""
    from selenium.webdriver.common.by import By

    found = driver.find_elements(By.CSS_SELECTOR, css)
    return found[0].text if found and found[0].is_displayed() else ""


def artifacts_folder(fallback: Path) -> Path:
    """Where screenshots go: $SPARKRUNNER_TEST_ARTIFACTS (CI keeps it), else `fallback` (a tmp folder)."""
    kept = os.environ.get("SPARKRUNNER_TEST_ARTIFACTS")
    folder = Path(kept) if kept else fallback
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def screenshot(driver: Any, path: Path) -> Path:
    """A screenshot of the whole page (the window stretched to its height) at `path`."""
    width = driver.execute_script("return window.innerWidth")
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(width, height + 100)
    driver.execute_script("window.scrollTo(0, 0)")
    driver.save_screenshot(str(path))
    return path
