#!/usr/bin/env bash
# A batch through `ratekeeper fetch`: fetched once, run again without
# writing anything twice, then re-synced paying only for what changed.
#
#   GITHUB_TOKEN=ghp_a,ghp_b bash examples/fetch.sh
#
# Against the simulator instead of api.github.com:
#
#   ratekeeper sim --listen 127.0.0.1:8081 --tokens 2 &
#   GITHUB_TOKEN=sim-token-1,sim-token-2 GITHUB_API=http://127.0.0.1:8081 bash examples/fetch.sh
#
# RATEKEEPER names the binary (default: ratekeeper on the PATH); the files
# go to WORKDIR (default: a new temporary directory).
set -euo pipefail

rk=${RATEKEEPER:-ratekeeper}
api=${GITHUB_API:-https://api.github.com}
work=${WORKDIR:-$(mktemp -d)}
cd "$work"

# GITHUB_TOKEN's tokens go to api.github.com, or to the root given here.
args=(--db ratekeeper.db --progress off)
if [ "$api" != https://api.github.com ]; then
  args+=(--provider "github=$api")
fi

for repo in golang/go golang/tools golang/net golang/text; do
  echo "$api/repos/$repo"
done > urls.txt

# 1. One JSON line per URL: status, etag, sha256, size, body, credential, …
"$rk" fetch -i urls.txt -o results.jsonl "${args[@]}"
echo "fetched: $(wc -l < results.jsonl) lines, $(grep -c '"status":200' results.jsonl) with status 200"

# 2. The same command again, as after a crash or Ctrl-C: the URLs already
#    in results.jsonl are neither fetched nor written again.
"$rk" fetch -i urls.txt -o results.jsonl "${args[@]}"
echo "run again: still $(wc -l < results.jsonl) lines"

# 3. A re-sync: each URL goes as a conditional request on its previous
#    answer; an unchanged one is a 304 (free on GitHub), marked not_modified.
"$rk" fetch -i urls.txt --since results.jsonl -o today.jsonl "${args[@]}"
echo "re-sync: $(grep -c '"not_modified":true' today.jsonl) of $(wc -l < today.jsonl) unchanged"
