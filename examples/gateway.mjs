// Read GitHub through `ratekeeper serve` from Node (18 or later: the
// built-in fetch, no packages).
//
//   GITHUB_TOKEN=ghp_a,ghp_b ratekeeper serve --listen 127.0.0.1:8080 &
//   node examples/gateway.mjs
//
// The gateway holds the tokens, picks one per request, paces, and answers a
// repeated GET with a conditional request (free on GitHub); this script
// sends plain GETs. GATEWAY_URL names another gateway (default
// http://127.0.0.1:8080).

const gateway = (process.env.GATEWAY_URL ?? "http://127.0.0.1:8080").replace(/\/+$/, "");

// get fetches url through the gateway. When quota returns later than the
// gateway's --max-wait, it answers 429 with a truthful Retry-After, as
// GitHub does: wait that long and ask again.
async function get(url) {
  for (let i = 0; i < 5; i++) {
    const resp = await fetch(url);
    if (resp.status === 429) {
      const seconds = Number(resp.headers.get("retry-after") ?? "1");
      await new Promise((resolve) => setTimeout(resolve, seconds * 1000));
      continue;
    }
    if (!resp.ok) {
      throw new Error(`${url}: ${resp.status} ${await resp.text()}`);
    }
    return { body: await resp.json(), headers: resp.headers };
  }
  throw new Error(`${url}: still rate limited after 5 tries`);
}

// nextLink returns the rel="next" URL of a Link header, or null.
function nextLink(headers) {
  for (const part of (headers.get("link") ?? "").split(",")) {
    const m = part.match(/^\s*<([^>]+)>;\s*rel="next"/);
    if (m) return m[1];
  }
  return null;
}

// The same repository twice: the second answer comes from the gateway's
// cache without going upstream (GitHub says s-maxage=60); later, it would
// be GitHub's free 304, served as the stored 200.
for (let i = 0; i < 2; i++) {
  const { body: repo, headers } = await get(`${gateway}/github/repos/golang/go`);
  console.log(`${repo.full_name}: ${repo.stargazers_count} stars, cache ${headers.get("x-ratekeeper-cache")}`);
}

// Pagination: the gateway rewrites Link headers to point at itself.
let url = `${gateway}/github/repos/golang/go/issues?per_page=10`;
let issues = 0;
let pages = 0;
while (url) {
  if (!url.startsWith(gateway + "/")) {
    throw new Error(`a next page outside the gateway: ${url}`);
  }
  const { body, headers } = await get(url);
  issues += body.length;
  pages++;
  url = nextLink(headers);
}
console.log(`issues of golang/go: ${issues} in ${pages} pages`);

// A worker pool of its own: the gateway paces whatever arrives, so 8
// workers read 40 repositories as fast as the quota allows.
const names = Array.from({ length: 40 }, (_, i) => `golang/tools${i}`);
let read = 0;
await Promise.all(
  Array.from({ length: 8 }, async () => {
    for (let name = names.shift(); name; name = names.shift()) {
      const { body } = await get(`${gateway}/github/repos/${name}`);
      if (body.full_name) read++;
    }
  }),
);
console.log(`read ${read} repositories with 8 workers`);
