#!/usr/bin/env python3
"""Send a batch of prompts to OpenAI through `ratekeeper serve`, with the
standard library only.

    OPENAI_API_KEY=sk-a,sk-b ratekeeper serve --listen 127.0.0.1:8080 &
    python3 examples/llm_gateway.py

The gateway holds the keys and paces every request by the tokens it will
take (its prompt's characters / 4 plus max_tokens, or the X-Ratekeeper-Cost
header when the caller counted), so its tokens do not run out; any SDK
pointed at GATEWAY_URL/openai as its base URL does the same. GATEWAY_URL
names another gateway (default http://127.0.0.1:8080).
"""

import concurrent.futures
import json
import os
import time
import urllib.error
import urllib.request

GATEWAY = os.environ.get("GATEWAY_URL", "http://127.0.0.1:8080").rstrip("/")
PROMPTS = 24


def chat(prompt, max_tokens):
    """POST one chat completion; return the status, the usage and the headers."""
    body = json.dumps({
        "model": "gpt-4o-mini",
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": prompt}],
    }).encode()
    for _ in range(5):
        req = urllib.request.Request(f"{GATEWAY}/openai/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                return resp.status, json.load(resp)["usage"], resp.headers
        except urllib.error.HTTPError as err:
            if err.code != 429:
                raise
            # Quota returns later than the gateway's --max-wait: it says when.
            time.sleep(float(err.headers.get("Retry-After", "1")))
    raise RuntimeError("still rate limited after 5 tries")


def main():
    prompts = [("Summarise chapter %d. " % i) * 20 for i in range(PROMPTS)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=6) as pool:
        results = list(pool.map(lambda p: chat(p, 200), prompts))
    ok = sum(1 for status, _, _ in results if status == 200)
    prompt_tokens = sum(u["prompt_tokens"] for _, u, _ in results)
    completion_tokens = sum(u["completion_tokens"] for _, u, _ in results)
    print(f"answered {len(results)} prompts, {ok} with status 200")
    print(f"tokens: {prompt_tokens} prompt, {completion_tokens} completion")
    # The pool's view of the bucket that paced the batch, in the IETF
    # draft's fields naming their unit.
    print(f"RateLimit-Policy: {results[-1][2]['RateLimit-Policy']}")


if __name__ == "__main__":
    main()
