#!/usr/bin/env python3
"""Read GitHub through `ratekeeper serve`, with the standard library only.

    GITHUB_TOKEN=ghp_a,ghp_b ratekeeper serve --listen 127.0.0.1:8080 &
    python3 examples/gateway.py

The gateway holds the tokens, picks one per request, paces, and answers a
repeated GET with a conditional request (free on GitHub); this script sends
plain GETs. GATEWAY_URL names another gateway (default http://127.0.0.1:8080).
"""

import concurrent.futures
import json
import os
import re
import sys
import time
import urllib.error
import urllib.request

GATEWAY = os.environ.get("GATEWAY_URL", "http://127.0.0.1:8080").rstrip("/")


def get(url):
    """GET url through the gateway; return the decoded JSON and the headers.

    When quota returns later than the gateway's --max-wait, it answers 429
    with a truthful Retry-After, as GitHub does: wait that long and ask again.
    """
    for _ in range(5):
        try:
            with urllib.request.urlopen(url, timeout=60) as resp:
                return json.load(resp), resp.headers
        except urllib.error.HTTPError as err:
            if err.code != 429:
                raise
            time.sleep(int(err.headers.get("Retry-After", "1")))
    raise RuntimeError(f"{url}: still rate limited after 5 tries")


def next_link(headers):
    """The rel="next" URL of a Link header, or None."""
    for part in headers.get("Link", "").split(","):
        m = re.match(r'\s*<([^>]+)>;\s*rel="next"', part)
        if m:
            return m.group(1)
    return None


def main():
    # The same repository twice: the second answer comes from the
    # gateway's cache without going upstream (GitHub says s-maxage=60);
    # later, it would be GitHub's free 304, served as the stored 200.
    for _ in range(2):
        repo, headers = get(f"{GATEWAY}/github/repos/golang/go")
        print(f"{repo['full_name']}: {repo['stargazers_count']} stars, cache {headers['X-Ratekeeper-Cache']}")

    # Pagination: the gateway rewrites Link headers to point at itself.
    url, issues, pages = f"{GATEWAY}/github/repos/golang/go/issues?per_page=10", [], 0
    while url:
        if not url.startswith(GATEWAY + "/"):
            sys.exit(f"a next page outside the gateway: {url}")
        page, headers = get(url)
        issues += page
        pages += 1
        url = next_link(headers)
    print(f"issues of golang/go: {len(issues)} in {pages} pages")

    # A worker pool of its own: the gateway paces whatever arrives, so 8
    # threads read 40 repositories as fast as the quota allows.
    names = [f"golang/tools{i}" for i in range(40)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        repos = list(pool.map(lambda n: get(f"{GATEWAY}/github/repos/{n}")[0], names))
    print(f"read {sum(1 for r in repos if r.get('full_name'))} repositories with 8 workers")


if __name__ == "__main__":
    main()
