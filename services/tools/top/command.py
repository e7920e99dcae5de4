"""`inferq top`'s loop: scrape every service's /metrics once a second, keep the last `window`
seconds of scrapes, draw a frame with rich's Live display; Ctrl-C leaves with exit code 0."""

from __future__ import annotations

import argparse
import time
from collections import deque
from collections.abc import Callable, Sequence

import httpx
from rich.console import Console
from rich.live import Live

from inferq.tools.top.frame import build_frame, render
from inferq.tools.top.samples import Scrape

SCRAPE_TIMEOUT_S = 2.0


class Scraper:
    """Reads every URL's /metrics and merges them into one `Scrape`; a service that does not
    answer is named in `down` and left out of that scrape."""

    def __init__(self, urls: Sequence[str], clock: Callable[[], float] = time.monotonic) -> None:
        self._urls = [
            u.rstrip("/") + "/metrics" if not u.rstrip("/").endswith("/metrics") else u for u in urls
        ]
        self._clock = clock
        self._client = httpx.Client(timeout=SCRAPE_TIMEOUT_S)
        self.down: list[str] = []

    def scrape(self) -> Scrape:
        merged = Scrape(self._clock())
        self.down = []
        for url in self._urls:
            try:
                response = self._client.get(url)
                response.raise_for_status()
                merged = merged.merged(Scrape.parse(response.text, merged.at))
            except (httpx.HTTPError, ValueError):
                self.down.append(url)
        return merged

    def close(self) -> None:
        self._client.close()


def run_top(args: argparse.Namespace) -> int:
    urls = [*args.dispatcher, *args.ingest]
    scraper = Scraper(urls)
    console = Console()
    kept: deque[Scrape] = deque()

    def next_frame() -> object:
        scrape = scraper.scrape()
        kept.append(scrape)
        while len(kept) > 1 and scrape.at - kept[0].at > args.window:
            kept.popleft()
        return render(build_frame(list(kept), scraper.down))

    try:
        if args.once:
            # Two scrapes a second apart, so the rates and the wait P95 have something to show.
            next_frame()
            time.sleep(args.interval)
            console.print(next_frame())
            return 0
        with Live(next_frame(), console=console, refresh_per_second=4, screen=False) as live:  # type: ignore[arg-type]
            while True:
                time.sleep(args.interval)
                live.update(next_frame())  # type: ignore[arg-type]
    except KeyboardInterrupt:
        return 0
    finally:
        scraper.close()
